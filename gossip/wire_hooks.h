/* wire_hooks.h - the simulator's seam into a fed_wire: what fedsim and the
 * tests may make a wire do that no daemon can be configured to do. A
 * fed_wire_cfg's hooks point here (NULL: none); only sim/ and tests/
 * include this header, and no option of fednode's sets the pointer, so
 * sealing cannot be turned off in a daemon. */
#ifndef FED_GOSSIP_WIRE_HOOKS_H
#define FED_GOSSIP_WIRE_HOOKS_H

#include "gossip/wire.h"

struct fed_wire_hooks {
    /* Sealed frames go in the clear, unsigned, the seal's bytes zero; every
       check before the seal still runs. No chunk streams (a stream is
       sealed end to end). fedsim --no-crypto, for its largest runs. */
    int unsealed;
};

/* The hooks of fedsim --no-crypto. */
extern const fed_wire_hooks fedi_wire_hooks_unsealed;

#endif
