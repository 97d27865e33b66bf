// pcastsrc: a live GstBin source that subscribes to a stream of a PCast platform and exposes its
// decoded tracks as sometimes pads `video` and `audio`. Each pad is a ghost pad onto an appsrc
// that Swift pushes the SDK's decoded frames into, stamped as they arrive.
#include <gst/app/app.h>
#include "CPCastGstPlugin.h"
#include "swift_seam.h"
#include "elements.h"

GST_DEBUG_CATEGORY_STATIC(pcast_src_debug);
#define GST_CAT_DEFAULT pcast_src_debug

struct _PCastSrc {
  GstBin parent;
  gchar *server, *auth_token, *token;  // GST_OBJECT_LOCK
  guint playout_delay;
  gboolean decode;
  GstElement *sources[2];              // the appsrcs, owned by the bin
  gboolean exposed[2];                 // GST_OBJECT_LOCK
  void *swift;
};

enum { PROP_0, PROP_SERVER, PROP_AUTH_TOKEN, PROP_TOKEN, PROP_PLAYOUT_DELAY, PROP_DECODE, N_PROPS };
static GParamSpec *props[N_PROPS];

static GstStaticPadTemplate video_template = GST_STATIC_PAD_TEMPLATE(
    "video", GST_PAD_SRC, GST_PAD_SOMETIMES,
    GST_STATIC_CAPS("video/x-raw; video/x-h264, stream-format=(string)byte-stream, alignment=(string)au"));
static GstStaticPadTemplate audio_template = GST_STATIC_PAD_TEMPLATE(
    "audio", GST_PAD_SRC, GST_PAD_SOMETIMES, GST_STATIC_CAPS("audio/x-raw; audio/x-opus"));

G_DEFINE_TYPE(PCastSrc, pcast_src, GST_TYPE_BIN);

static void pcast_src_set_property(GObject *object, guint id, const GValue *value, GParamSpec *spec) {
  PCastSrc *self = PCAST_SRC(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
  case PROP_SERVER: g_free(self->server); self->server = g_value_dup_string(value); break;
  case PROP_AUTH_TOKEN: g_free(self->auth_token); self->auth_token = g_value_dup_string(value); break;
  case PROP_TOKEN: g_free(self->token); self->token = g_value_dup_string(value); break;
  case PROP_PLAYOUT_DELAY: self->playout_delay = g_value_get_uint(value); break;
  case PROP_DECODE: self->decode = g_value_get_boolean(value); break;
  default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, spec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void pcast_src_get_property(GObject *object, guint id, GValue *value, GParamSpec *spec) {
  PCastSrc *self = PCAST_SRC(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
  case PROP_SERVER: g_value_set_string(value, self->server); break;
  case PROP_AUTH_TOKEN: g_value_set_string(value, self->auth_token); break;
  case PROP_TOKEN: g_value_set_string(value, self->token); break;
  case PROP_PLAYOUT_DELAY: g_value_set_uint(value, self->playout_delay); break;
  case PROP_DECODE: g_value_set_boolean(value, self->decode); break;
  default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, spec);
  }
  GST_OBJECT_UNLOCK(self);
}

static GstStateChangeReturn pcast_src_change_state(GstElement *element, GstStateChange transition) {
  PCastSrc *self = PCAST_SRC(element);
  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
    GST_OBJECT_LOCK(self);
    PCastSourceSettings settings = {
      .server = g_strdup(self->server), .auth_token = g_strdup(self->auth_token), .token = g_strdup(self->token),
      .playout_delay = self->playout_delay, .decode = self->decode,
    };
    GST_OBJECT_UNLOCK(self);
    gboolean started = pcast_swift_src_start(self->swift, &settings);
    g_free((gchar *)settings.server); g_free((gchar *)settings.auth_token); g_free((gchar *)settings.token);
    if (!started) return GST_STATE_CHANGE_FAILURE;
  }
  GstStateChangeReturn result = GST_ELEMENT_CLASS(pcast_src_parent_class)->change_state(element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY ||
      (transition == GST_STATE_CHANGE_READY_TO_PAUSED && result == GST_STATE_CHANGE_FAILURE)) {
    pcast_swift_src_stop(self->swift);
  }
  return result;
}

static void pcast_src_finalize(GObject *object) {
  PCastSrc *self = PCAST_SRC(object);
  pcast_swift_src_free(self->swift);
  g_free(self->server); g_free(self->auth_token); g_free(self->token);
  G_OBJECT_CLASS(pcast_src_parent_class)->finalize(object);
}

static void pcast_src_class_init(PCastSrcClass *klass) {
  GObjectClass *object_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  object_class->set_property = pcast_src_set_property;
  object_class->get_property = pcast_src_get_property;
  object_class->finalize = pcast_src_finalize;
  const GParamFlags settable = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY;
  props[PROP_SERVER] = g_param_spec_string("server", "Server", "The platform's signaling URL (ws://host:port/ws)", NULL, settable);
  props[PROP_AUTH_TOKEN] = g_param_spec_string("auth-token", "Auth token", "Authentication token for the platform session", NULL, settable);
  props[PROP_TOKEN] = g_param_spec_string("token", "Stream token", "Stream token of the stream to play", NULL, settable);
  props[PROP_PLAYOUT_DELAY] = g_param_spec_uint("playout-delay", "Playout delay", "Jitter buffer in milliseconds (0: the SDK's default)", 0, 10000, 0, settable);
  props[PROP_DECODE] = g_param_spec_boolean("decode", "Decode", "Raw frames (true), or the H.264 access units and Opus packets as they came (false)", TRUE, settable);
  g_object_class_install_properties(object_class, N_PROPS, props);
  gst_element_class_add_static_pad_template(element_class, &video_template);
  gst_element_class_add_static_pad_template(element_class, &audio_template);
  gst_element_class_set_static_metadata(element_class, "PCast subscriber", "Source/Network",
      "Plays a stream of a PCast platform: decoded video and audio (or, with decode=false, its H.264 and Opus) on "
      "sometimes pads; EOS when the stream "
      "ends, after a pcast-stream-ended element message with the reason",
      "PCastKit engineers");
  element_class->change_state = GST_DEBUG_FUNCPTR(pcast_src_change_state);
  GST_DEBUG_CATEGORY_INIT(pcast_src_debug, "pcastsrc", 0, "PCast subscriber");
}

static void pcast_src_init(PCastSrc *self) {
  GST_OBJECT_FLAG_SET(self, GST_ELEMENT_FLAG_SOURCE);
  self->decode = TRUE;
  const char *names[2] = {"video-appsrc", "audio-appsrc"};
  for (int i = 0; i < 2; i++) {
    GstElement *source = gst_element_factory_make("appsrc", names[i]);
    // Live, stamped on arrival (the SDK's jitter buffer has already paced them); the few
    // milliseconds downstream needs to convert a frame are its latency.
    g_object_set(source, "is-live", TRUE, "format", GST_FORMAT_TIME, "do-timestamp", TRUE,
                 "min-latency", (gint64)(20 * GST_MSECOND), "max-buffers", (guint64)8, "block", FALSE, NULL);
    gst_bin_add(GST_BIN(self), source);
    self->sources[i] = source;
  }
  self->swift = pcast_swift_src_new(GST_ELEMENT(self));
}

void pcast_src_add_pads(GstElement *element, gboolean video, gboolean audio) {
  PCastSrc *self = PCAST_SRC(element);
  gboolean wanted[2] = {video, audio};
  GstStaticPadTemplate *templates[2] = {&video_template, &audio_template};
  for (int i = 0; i < 2; i++) {
    GST_OBJECT_LOCK(self);
    gboolean add = wanted[i] && !self->exposed[i];
    if (add) self->exposed[i] = TRUE;
    GST_OBJECT_UNLOCK(self);
    if (!add) continue;
    GstPad *target = gst_element_get_static_pad(self->sources[i], "src");
    GstPadTemplate *templ = gst_static_pad_template_get(templates[i]);
    GstPad *ghost = gst_ghost_pad_new_from_template(templ->name_template, target, templ);
    gst_object_unref(templ);
    gst_object_unref(target);
    gst_pad_set_active(ghost, TRUE);
    gst_element_add_pad(element, ghost);
  }
  gst_element_no_more_pads(element);
}

gboolean pcast_src_push(GstElement *element, PCastPadKind kind, GstBuffer *buffer, GstCaps *caps) {
  PCastSrc *self = PCAST_SRC(element);
  GstAppSrc *source = GST_APP_SRC(self->sources[kind == PCAST_PAD_AUDIO ? 1 : 0]);
  GstCaps *current = gst_app_src_get_caps(source);
  if (current == NULL || !gst_caps_is_equal(current, caps)) gst_app_src_set_caps(source, caps);
  if (current) gst_caps_unref(current);
  return gst_app_src_push_buffer(source, buffer) == GST_FLOW_OK;
}

void pcast_src_end(GstElement *element) {
  PCastSrc *self = PCAST_SRC(element);
  for (int i = 0; i < 2; i++) {
    GST_OBJECT_LOCK(self);
    gboolean exposed = self->exposed[i];
    GST_OBJECT_UNLOCK(self);
    if (exposed) gst_app_src_end_of_stream(GST_APP_SRC(self->sources[i]));
  }
}
