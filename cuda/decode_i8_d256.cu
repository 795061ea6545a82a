// decode_i8_d256.cu — decode_stage1_i8 at head dim 256 (decode_i8.cuh); one file per head dim keeps
// each compile short.
#include "decode_i8.cuh"

#ifdef WITCERT_INSTANTIATE_ALL
#define WC_I8_INST_PAGES(D, G, BITS)  // (page contributions: d <= 128)
WC_I8_INST_OTHER_D(256)
#endif
