/* avxvnni.c's table in the EVEX encoding (AVX512-VNNI with VL): see the top of that
 * file. Compiled with the AVX-512 target flags (Makefile). */
#define LLMM_AVXVNNI_EVEX 1
#include "avxvnni.c"
