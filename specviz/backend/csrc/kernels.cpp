// The library's one translation unit: each source below is compiled as part of it, so that
// the compiler reads torch's headers once (specviz.backend.kernels.build).
#include "int8_linear.cpp"
#include "top_p.cpp"
