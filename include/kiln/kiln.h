/* Kiln: a graph compiler for neural networks. This header includes the whole public API. */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include "core.h"
#include "options.h"
#include "graph.h"
#include "tensor.h"
#include "params.h"
#include "aot.h"
#include "compile.h"
#include "layers.h"
#include "train.h"
#include "fit.h"
#include "comm.h"
#include "program.h"
#include "onnx.h"

#endif
