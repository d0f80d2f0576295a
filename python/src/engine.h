/* python/src/engine.h: the tern.Engine type (engine.c): creation, close,
 * attributes and the method table, which names the methods of
 * engine_memory.c, engine_peers.c and batch.c.  What the other files use
 * of an Engine is in engine_base.h. */
#ifndef TERNPY_ENGINE_H
#define TERNPY_ENGINE_H

#include "ternpy.h"

extern PyTypeObject TernPy_EngineType;

#endif
