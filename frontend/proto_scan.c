/* A pre-pass over the protobuf wire format of a ModelProto, run before
 * protobuf-c unpacks it. protobuf-c recurses once per nested message and has
 * no depth limit, so a crafted file of a few hundred KB (graphs inside
 * attributes inside graphs..., or TypeProto sequences of sequences) would
 * exhaust the stack. This walker follows only the fields through which
 * ONNX messages can nest, with an explicit stack, and rejects files nested
 * deeper than GPUC_PROTO_MAX_DEPTH or whose framing is broken. It also
 * bounds the number of fields in those messages (GPUC_PROTO_MAX_FIELDS):
 * protobuf-c allocates for each, so 20 MB of empty nodes would otherwise
 * cost gigabytes before any of our checks run. */
#include "frontend.h"
#include <stdint.h>
#include <string.h>

enum { M_NONE, M_MODEL, M_GRAPH, M_NODE, M_ATTR, M_VALUEINFO, M_TYPE, M_TYPE_ELEM,
       M_TYPE_MAP, M_FUNCTION, M_TRAINING };

/* Which submessage type field `field` of message `m` is (M_NONE: skip). */
static int child_type(int m, uint32_t field) {
  switch (m) {
  case M_MODEL:
    return field == 7 ? M_GRAPH : field == 25 ? M_FUNCTION : field == 20 ? M_TRAINING : M_NONE;
  case M_GRAPH:
    return field == 1 ? M_NODE : (field == 11 || field == 12 || field == 13) ? M_VALUEINFO : M_NONE;
  case M_NODE: return field == 5 ? M_ATTR : M_NONE;
  case M_ATTR:
    return (field == 6 || field == 11) ? M_GRAPH : (field == 14 || field == 15) ? M_TYPE : M_NONE;
  case M_VALUEINFO: return field == 2 ? M_TYPE : M_NONE;
  case M_TYPE: /* sequence_type=4, optional_type=9 hold elem_type=1; map_type=5 value_type=2 */
    return (field == 4 || field == 9) ? M_TYPE_ELEM : field == 5 ? M_TYPE_MAP : M_NONE;
  case M_TYPE_ELEM: return field == 1 ? M_TYPE : M_NONE;
  case M_TYPE_MAP: return field == 2 ? M_TYPE : M_NONE;
  /* node = 7; attribute_proto = 11 (IR 9: defaults, unknown to the old
   * onnx.proto, unpacked later by frontend/onnx_functions.c) */
  case M_FUNCTION: return field == 7 ? M_NODE : field == 11 ? M_ATTR : M_NONE;
  case M_TRAINING: return (field == 1 || field == 2) ? M_GRAPH : M_NONE;
  }
  return M_NONE;
}

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*p >= end) return -1;
    uint8_t b = *(*p)++;
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) { *v = r; return 0; }
  }
  return -1;
}

int gpuc_proto_scan(const uint8_t *buf, size_t len, const char *path, GpucErr *e) {
  struct { const uint8_t *p, *end; int type; } st[GPUC_PROTO_MAX_DEPTH + 1];
  int top = 0;
  uint64_t fields = 0; /* every field of a graph-level message allocates in protobuf-c */
  st[0].p = buf;
  st[0].end = buf + len;
  st[0].type = M_MODEL;
  while (top >= 0) {
    if (st[top].p == st[top].end) { top--; continue; }
    const uint8_t **p = &st[top].p, *end = st[top].end;
    uint64_t key, v;
    if (read_varint(p, end, &key)) goto broken;
    uint32_t field = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
    if (field == 0) goto broken;
    if (++fields > GPUC_PROTO_MAX_FIELDS)
      return gpuc_err_set(e, "%s: more than %d nodes, attributes, names and other graph elements; "
                             "refusing to decode (memory)", path, GPUC_PROTO_MAX_FIELDS);
    switch (wt) {
    case 0: if (read_varint(p, end, &v)) goto broken; break;
    case 1: if (end - *p < 8) goto broken; *p += 8; break;
    case 5: if (end - *p < 4) goto broken; *p += 4; break;
    case 2: {
      if (read_varint(p, end, &v) || v > (uint64_t)(end - *p)) goto broken;
      const uint8_t *sub = *p;
      *p += v;
      int ct = child_type(st[top].type, field);
      if (ct != M_NONE && v > 0) {
        if (top + 1 > GPUC_PROTO_MAX_DEPTH)
          return gpuc_err_set(e, "%s: messages nested more than %d deep (graphs inside "
                                 "attributes or nested types); refusing to parse", path,
                              GPUC_PROTO_MAX_DEPTH);
        top++;
        st[top].p = sub;
        st[top].end = sub + v;
        st[top].type = ct;
      }
      break;
    }
    default: goto broken;
    }
  }
  return 0;
broken:
  return gpuc_err_set(e, "%s: not a valid ONNX protobuf file (truncated or corrupt at byte %lld)",
                      path, (long long)(st[top].p - buf));
}
