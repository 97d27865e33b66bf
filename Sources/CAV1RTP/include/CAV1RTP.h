// The AV1 RTP payloader and depayloader elements (pcastav1pay, pcastav1depay): GStreamer 1.22 has
// none. C only for what Swift cannot do: subclass GstRTPBasePayload and GstRTPBaseDepayload (GObject
// class and instance structs, vfuncs). The payload format itself is Swift (PCastProtocol's
// AV1Payload and AV1Depacketizer), handed in once as the functions below.
#ifndef PCAST_CAV1RTP_H
#define PCAST_CAV1RTP_H

#include <gst/gst.h>

// Called by `packetize` for each RTP payload of a temporal unit, in order.
typedef void (*PCastAV1EmitPacket)(void *sink, const guint8 *payload, gsize size, gboolean marker);
// Called by `depacketize` with a whole temporal unit (low-overhead bitstream format).
typedef void (*PCastAV1EmitUnit)(void *sink, const guint8 *unit, gsize size, gboolean keyframe);

typedef struct {
    // Splits one temporal unit into payloads of at most `max_payload` bytes; FALSE (nothing
    // emitted) when the unit does not parse.
    gboolean (*packetize)(const guint8 *unit, gsize size, guint max_payload, void *sink, PCastAV1EmitPacket emit);
    // A reassembler's state, owned by the element (freed with `depacketizer_free`).
    void *(*depacketizer_new)(gboolean wait_for_keyframe);
    void (*depacketizer_free)(void *state);
    void (*depacketizer_reset)(void *state);
    // Takes one packet; emits a unit it completes; TRUE when a unit was lost (a keyframe is needed).
    gboolean (*depacketize)(void *state, const guint8 *payload, gsize size, guint16 sequence, guint32 timestamp,
                            gboolean marker, void *sink, PCastAV1EmitUnit emit);
} PCastAV1Functions;

// Registers both elements for this process (no plugin: gst_element_register with NULL), or in
// `plugin` when one loads them. `functions` must outlive the process. FALSE if registration failed.
gboolean pcast_av1_elements_register(GstPlugin *plugin, const PCastAV1Functions *functions);

#endif
