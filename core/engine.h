/* core/engine.h: everything internal, for engine.c and the tests: the
 * engine's objects (engine_state.h) and the data path's stages.  No other
 * core file includes it (that would close a circle through engine.c). */
#ifndef TERN_CORE_ENGINE_H
#define TERN_CORE_ENGINE_H

#include "datapath/batch.h"
#include "datapath/complete.h"
#include "datapath/cut.h"
#include "datapath/dispatch.h"
#include "datapath/request.h"
#include "datapath/route.h"
#include "engine/endpoint.h"
#include "engine/engine_error.h"
#include "engine/engine_state.h"
#include "peer/negotiate.h"
#include "engine/notify.h"

#endif
