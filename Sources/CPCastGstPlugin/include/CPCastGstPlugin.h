// The GStreamer plugin's C side, as Swift sees it: the settings the elements hand to Swift, and the
// calls Swift makes back into an element (any thread). The functions C calls in Swift are declared
// in ../swift_seam.h, not here: Swift must not import declarations of its own @_cdecl functions.
#ifndef PCAST_GST_PLUGIN_H
#define PCAST_GST_PLUGIN_H

#include <gst/gst.h>

G_BEGIN_DECLS

// Which pad a sample came in on or goes out of.
typedef enum { PCAST_PAD_VIDEO = 0, PCAST_PAD_AUDIO = 1 } PCastPadKind;

// pcastsink's properties when it starts (READY -> PAUSED). Strings may be NULL; they stay the
// caller's (Swift copies them).
typedef struct {
  const char *server;
  const char *auth_token;
  const char *token;
  const char *tags;          // comma-separated
  const char *stream_name;
  const char *publish_type;  // "live", "record", "append"
  guint video_bitrate;       // kbit/s, 0: the SDK's default
  const char *video_codec;   // "h264", "vp8", "vp9"
  gboolean has_video;        // a video pad was requested (raw, or H.264)
  gboolean has_audio;
  gboolean passthrough;      // a pad is video_h264 or audio_opus: Matroska samples come, not raw ones
} PCastSinkSettings;

// pcastsrc's properties when it starts.
typedef struct {
  const char *server;
  const char *auth_token;
  const char *token;
  guint playout_delay;       // milliseconds, 0: the SDK's default
  gboolean decode;           // FALSE: the encoded media as it came
} PCastSourceSettings;

// Sets pcastsink's read-only `stream-id` (notify::stream-id) and posts the element message
// `pcast-stream-published, stream-id=(string)…`.
void pcast_element_stream_published(GstElement *element, const char *stream_id);

// Posts an element message `name` with up to two string fields (a NULL key ends the list).
void pcast_element_post(GstElement *element, const char *name, const char *key1, const char *value1,
                        const char *key2, const char *value2);

// GST_ELEMENT_ERROR(element, RESOURCE, FAILED, (message), (debug)): a macro, so Swift cannot.
void pcast_element_post_error(GstElement *element, const char *message, const char *debug);

// pcastsrc: exposes the sometimes pads of the tracks the stream has, then no-more-pads.
void pcast_src_add_pads(GstElement *element, gboolean video, gboolean audio);

// pcastsrc: pushes a frame (decoded, or an encoded unit) out of a pad (transfer full of `buffer`; `caps` stays the
// caller's and is set when it changed). FALSE when it was not taken (not linked, flushing).
gboolean pcast_src_push(GstElement *element, PCastPadKind kind, GstBuffer *buffer, GstCaps *caps);

// pcastsrc: end of stream on every exposed pad.
void pcast_src_end(GstElement *element);

G_END_DECLS

#endif
