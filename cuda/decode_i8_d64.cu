// decode_i8_d64.cu — decode_stage1_i8 at head dim 64 (decode_i8.cuh); one file per head dim keeps
// each compile short.
#include "decode_i8.cuh"

#ifdef WITCERT_INSTANTIATE_ALL
#define WC_I8_INST_PAGES(D, G, BITS) WC_I8_INST1B(D, G, 2, true, false, false, BITS) WC_I8_INST1B(D, G, 2, true, true, false, BITS)
WC_I8_INST_OTHER_D(64)
#endif
