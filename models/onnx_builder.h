/* A small ONNX writer over protobuf-c, for the models gpuc bundles and
 * builds itself (demo, tests, training examples). Not part of libgpuc:
 * the compiler reads ONNX, it never needs to write it except here and in
 * the future `train --save`. */
#ifndef GPUC_ONNX_BUILDER_H
#define GPUC_ONNX_BUILDER_H
#include <stdint.h>
#include <stddef.h>

typedef struct OnnxBuilder OnnxBuilder;

OnnxBuilder *ob_new(const char *graph_name, int64_t opset);
/* Graph input/output of ONNX elem type (1 = FLOAT, 7 = INT64); dims < 0 are
 * symbolic, named by sym (may be NULL: "N"); "batch,seq" names them in
 * turn, the last name repeating. */
void ob_input(OnnxBuilder *b, const char *name, int elem_type, int rank, const int64_t *dims,
              const char *sym);
void ob_output(OnnxBuilder *b, const char *name, int elem_type, int rank, const int64_t *dims);
/* f32 initializer; data copied. */
void ob_init_f32(OnnxBuilder *b, const char *name, int rank, const int64_t *dims, const float *data);
void ob_init_i64(OnnxBuilder *b, const char *name, int rank, const int64_t *dims, const int64_t *data);
void ob_init_bool(OnnxBuilder *b, const char *name, int rank, const int64_t *dims, const uint8_t *data);
/* Node with inputs/outputs given as NULL-terminated name lists. */
void ob_node(OnnxBuilder *b, const char *op, const char *name, const char *const *ins,
             const char *const *outs);
/* Attributes on the last node added. */
void ob_attr_i(OnnxBuilder *b, const char *name, int64_t v);
void ob_attr_f(OnnxBuilder *b, const char *name, float v);
void ob_attr_ints(OnnxBuilder *b, const char *name, int n, const int64_t *v);
/* Serialize and free; returns 0 on success. Written atomically. */
int ob_save(OnnxBuilder *b, const char *path);

/* Deterministic random numbers (splitmix64), uniform in [-1, 1). */
float ob_rand(uint64_t *state);
#endif
