// pcastsink: a GstBin that publishes what reaches its request pads `video` and `audio` (raw) to a
// PCast platform. Each pad is a ghost pad onto `queue ! appsink` (synchronised, so a file plays at
// its own pace); the appsink hands each sample to Swift, which feeds the SDK's publisher.
#include <gst/app/app.h>
#include "CPCastGstPlugin.h"
#include "swift_seam.h"
#include "elements.h"

GST_DEBUG_CATEGORY_STATIC(pcast_sink_debug);
#define GST_CAT_DEFAULT pcast_sink_debug

struct _PCastSink {
  GstBin parent;
  // Properties, under GST_OBJECT_LOCK.
  gchar *server, *auth_token, *token, *tags, *stream_name, *publish_type, *stream_id, *video_codec;
  guint video_bitrate;
  gboolean chains_built;  // the elements after each pad's queue exist (from READY -> PAUSED on)
  void *swift;  // the Swift context, owned
};

enum { PROP_0, PROP_SERVER, PROP_AUTH_TOKEN, PROP_TOKEN, PROP_TAGS, PROP_PUBLISH_TYPE, PROP_STREAM_NAME,
       PROP_VIDEO_BITRATE, PROP_STREAM_ID, PROP_VIDEO_CODEC, N_PROPS };
static GParamSpec *props[N_PROPS];

static GstStaticPadTemplate video_template = GST_STATIC_PAD_TEMPLATE(
    "video", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS("video/x-raw"));
static GstStaticPadTemplate audio_template = GST_STATIC_PAD_TEMPLATE(
    "audio", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS("audio/x-raw"));
// Already-encoded H.264 and Opus: passed through (parsed, muxed to Matroska for the SDK's ingest),
// never decoded.
static GstStaticPadTemplate h264_template = GST_STATIC_PAD_TEMPLATE(
    "video_h264", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS("video/x-h264"));
static GstStaticPadTemplate opus_template = GST_STATIC_PAD_TEMPLATE(
    "audio_opus", GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS("audio/x-opus"));

G_DEFINE_TYPE(PCastSink, pcast_sink, GST_TYPE_BIN);

static gchar **string_property(PCastSink *self, guint id) {
  switch (id) {
  case PROP_SERVER: return &self->server;
  case PROP_AUTH_TOKEN: return &self->auth_token;
  case PROP_TOKEN: return &self->token;
  case PROP_TAGS: return &self->tags;
  case PROP_PUBLISH_TYPE: return &self->publish_type;
  case PROP_STREAM_NAME: return &self->stream_name;
  case PROP_STREAM_ID: return &self->stream_id;
  case PROP_VIDEO_CODEC: return &self->video_codec;
  default: return NULL;
  }
}

static void pcast_sink_set_property(GObject *object, guint id, const GValue *value, GParamSpec *spec) {
  PCastSink *self = PCAST_SINK(object);
  GST_OBJECT_LOCK(self);
  if (id == PROP_VIDEO_BITRATE) {
    self->video_bitrate = g_value_get_uint(value);
  } else if (id == PROP_PUBLISH_TYPE) {
    const char *type = g_value_get_string(value);
    if (type && g_strcmp0(type, "live") && g_strcmp0(type, "record") && g_strcmp0(type, "append")) {
      GST_OBJECT_UNLOCK(self);
      g_warning("pcastsink: publish-type must be live, record or append, not '%s'", type);
      return;
    }
    g_free(self->publish_type);
    self->publish_type = g_strdup(type);
  } else if (id == PROP_VIDEO_CODEC) {
    const char *codec = g_value_get_string(value);
    if (codec && g_ascii_strcasecmp(codec, "h264") && g_ascii_strcasecmp(codec, "vp8") && g_ascii_strcasecmp(codec, "vp9") && g_ascii_strcasecmp(codec, "av1")) {
      GST_OBJECT_UNLOCK(self);
      g_warning("pcastsink: video-codec must be h264, vp8, vp9 or av1, not '%s'", codec);
      return;
    }
    g_free(self->video_codec);
    self->video_codec = g_ascii_strdown(codec ? codec : "h264", -1);
  } else if (string_property(self, id)) {
    gchar **field = string_property(self, id);
    g_free(*field);
    *field = g_value_dup_string(value);
  } else {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, spec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void pcast_sink_get_property(GObject *object, guint id, GValue *value, GParamSpec *spec) {
  PCastSink *self = PCAST_SINK(object);
  GST_OBJECT_LOCK(self);
  if (id == PROP_VIDEO_BITRATE) {
    g_value_set_uint(value, self->video_bitrate);
  } else if (string_property(self, id)) {
    g_value_set_string(value, *string_property(self, id));
  } else {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, spec);
  }
  GST_OBJECT_UNLOCK(self);
}

static GstFlowReturn hand_over(GstAppSink *sink, PCastSink *self, PCastPadKind kind) {
  GstSample *sample = gst_app_sink_pull_sample(sink);
  if (sample == NULL) return GST_FLOW_OK;
  pcast_swift_sink_sample(self->swift, kind, sample);
  gst_sample_unref(sample);
  return GST_FLOW_OK;
}
static GstFlowReturn on_video_sample(GstAppSink *sink, gpointer data) { return hand_over(sink, PCAST_SINK(data), PCAST_PAD_VIDEO); }
static GstFlowReturn on_audio_sample(GstAppSink *sink, gpointer data) { return hand_over(sink, PCAST_SINK(data), PCAST_PAD_AUDIO); }

static GstFlowReturn on_mkv_sample(GstAppSink *sink, gpointer data) {
  PCastSink *self = PCAST_SINK(data);
  GstSample *sample = gst_app_sink_pull_sample(sink);
  if (sample == NULL) return GST_FLOW_OK;
  pcast_swift_sink_muxed(self->swift, sample);
  gst_sample_unref(sample);
  return GST_FLOW_OK;
}
static void on_mkv_eos(GstAppSink *sink, gpointer data) {
  pcast_swift_sink_eos(PCAST_SINK(data)->swift, PCAST_PAD_VIDEO);
  pcast_swift_sink_eos(PCAST_SINK(data)->swift, PCAST_PAD_AUDIO);
}

// Block (bounded) until the stream's end is sent: the bin's EOS, and gst-launch's exit, wait for it.
static void on_video_eos(GstAppSink *sink, gpointer data) { pcast_swift_sink_eos(PCAST_SINK(data)->swift, PCAST_PAD_VIDEO); }
static void on_audio_eos(GstAppSink *sink, gpointer data) { pcast_swift_sink_eos(PCAST_SINK(data)->swift, PCAST_PAD_AUDIO); }

static gboolean has_pad(GstElement *element, const char *name) {
  GstPad *pad = gst_element_get_static_pad(element, name);
  if (pad) gst_object_unref(pad);
  return pad != NULL;
}

static GstElement *child(GstElement *element, const char *kind, const char *suffix) {
  gchar *name = g_strconcat(kind, suffix, NULL);
  GstElement *found = gst_bin_get_by_name(GST_BIN(element), name);
  g_free(name);
  return found;  // transfer full, or NULL
}

static GstElement *make(GstElement *bin, const char *factory, const char *kind, const char *suffix) {
  gchar *name = g_strconcat(kind, suffix, NULL);
  GstElement *made = gst_element_factory_make(factory, name);
  g_free(name);
  if (made) gst_bin_add(GST_BIN(bin), made);
  else GST_ELEMENT_ERROR(bin, CORE, MISSING_PLUGIN, ("pcastsink needs the GStreamer element %s", factory), (NULL));
  return made;
}

// queue -> appsink for raw media: each sample goes to Swift, which feeds the SDK's encoders.
static gboolean build_raw_chain(GstElement *element, const char *kind) {
  GstElement *queue = child(element, kind, "-queue");
  GstElement *sink = make(element, "appsink", kind, "-appsink");
  if (!queue || !sink) { if (queue) gst_object_unref(queue); return FALSE; }
  // Synchronised, so a file plays at its own pace; without basesink's default 20 ms processing
  // deadline, which would hold every live frame that long before the SDK's encoder (measured: 58
  // ms through the elements against 38 through the Swift API; with it at 0, the same).
  g_object_set(sink, "sync", TRUE, "processing-deadline", (guint64)0, "max-buffers", 2, "drop", TRUE, "emit-signals", FALSE, NULL);
  gboolean audio = g_strcmp0(kind, "audio") == 0;
  // Any raw format is taken (the SDK converts), but what the encoders take is asked for first, so
  // a source that can produce it does: videotestsrc's own first choice is ABGR64, whose conversion
  // to I420 cost more than encoding the frame (measured: 2.3× the CPU of `pcast publish`).
  GstCaps *preferred = gst_caps_from_string(audio
      ? "audio/x-raw,format=S16LE,layout=interleaved,rate=48000; audio/x-raw,format=S16LE,layout=interleaved; audio/x-raw"
      : "video/x-raw,format=I420; video/x-raw,format=NV12; video/x-raw");
  g_object_set(sink, "caps", preferred, NULL);
  gst_caps_unref(preferred);
  GstAppSinkCallbacks callbacks = {0};
  callbacks.new_sample = audio ? on_audio_sample : on_video_sample;
  callbacks.eos = audio ? on_audio_eos : on_video_eos;
  gst_app_sink_set_callbacks(GST_APP_SINK(sink), &callbacks, element, NULL);
  gboolean linked = gst_element_link(queue, sink);
  gst_element_sync_state_with_parent(sink);
  gst_object_unref(queue);
  return linked;
}

// Encoded media passed through: every pad's chain ends in one streamable Matroska muxer whose
// bytes Swift pushes into the SDK's ingest, which re-payloads H.264 and Opus without decoding
// them. H.264 (pad video_h264) and Opus (pad audio_opus) are only parsed; a raw pad beside them
// is encoded here (x264enc zerolatency, opusenc), since the ingest takes one muxed stream.
static gboolean build_encoded_chain(PCastSink *self) {
  GstElement *element = GST_ELEMENT(self);
  GstElement *mux = make(element, "matroskamux", "mkv", "-mux");
  GstElement *sink = make(element, "appsink", "mkv", "-appsink");
  if (!mux || !sink) return FALSE;
  g_object_set(mux, "streamable", TRUE, NULL);
  g_object_set(sink, "sync", FALSE, "emit-signals", FALSE, NULL);
  GstAppSinkCallbacks callbacks = {0};
  callbacks.new_sample = on_mkv_sample;
  callbacks.eos = on_mkv_eos;
  gst_app_sink_set_callbacks(GST_APP_SINK(sink), &callbacks, element, NULL);
  gboolean ok = gst_element_link(mux, sink);
  if (ok && has_pad(element, "video_h264")) {
    GstElement *queue = child(element, "video_h264", "-queue");
    GstElement *parse = make(element, "h264parse", "video_h264", "-parse");
    ok = queue && parse;
    if (ok) {
      g_object_set(parse, "config-interval", -1, NULL);
      GstCaps *avc = gst_caps_from_string("video/x-h264,stream-format=avc,alignment=au");
      ok = gst_element_link(queue, parse) && gst_element_link_filtered(parse, mux, avc);
      gst_caps_unref(avc);
    }
    if (queue) gst_object_unref(queue);
  } else if (ok && has_pad(element, "video")) {
    GstElement *queue = child(element, "video", "-queue");
    GstElement *prefer = make(element, "capsfilter", "video", "-prefer");
    GstElement *convert = make(element, "videoconvert", "video", "-convert");
    GstElement *encoder = make(element, "x264enc", "video", "-encoder");
    GstElement *parse = make(element, "h264parse", "video", "-parse");
    ok = queue && prefer && convert && encoder && parse;
    if (ok) {
      // As build_raw_chain: the encoder's formats first, so a source that can make them does.
      GstCaps *preferred = gst_caps_from_string("video/x-raw,format=I420; video/x-raw,format=NV12; video/x-raw");
      g_object_set(prefer, "caps", preferred, NULL);
      gst_caps_unref(preferred);
      GST_OBJECT_LOCK(self);
      guint bitrate = self->video_bitrate > 0 ? self->video_bitrate : 2000;
      GST_OBJECT_UNLOCK(self);
      gst_util_set_object_arg(G_OBJECT(encoder), "tune", "zerolatency");
      gst_util_set_object_arg(G_OBJECT(encoder), "speed-preset", "ultrafast");
      g_object_set(encoder, "bitrate", bitrate, "key-int-max", 60, NULL);
      GstCaps *baseline = gst_caps_from_string("video/x-h264,profile=constrained-baseline");
      ok = gst_element_link_many(queue, prefer, convert, encoder, NULL) && gst_element_link_filtered(encoder, parse, baseline)
        && gst_element_link(parse, mux);
      gst_caps_unref(baseline);
    }
    if (queue) gst_object_unref(queue);
  }
  if (ok && has_pad(element, "audio_opus")) {
    GstElement *queue = child(element, "audio_opus", "-queue");
    GstElement *parse = make(element, "opusparse", "audio_opus", "-parse");
    ok = queue && parse && gst_element_link_many(queue, parse, mux, NULL);
    if (queue) gst_object_unref(queue);
  } else if (ok && has_pad(element, "audio")) {
    GstElement *queue = child(element, "audio", "-queue");
    GstElement *convert = make(element, "audioconvert", "audio", "-convert");
    GstElement *resample = make(element, "audioresample", "audio", "-resample");
    GstElement *encoder = make(element, "opusenc", "audio", "-encoder");
    ok = queue && convert && resample && encoder && gst_element_link_many(queue, convert, resample, encoder, mux, NULL);
    if (queue) gst_object_unref(queue);
  }
  return ok;
}

static gboolean passes_through(GstElement *element) {
  return has_pad(element, "video_h264") || has_pad(element, "audio_opus");
}

static gboolean build_chains(PCastSink *self) {
  GstElement *element = GST_ELEMENT(self);
  if (self->chains_built) return TRUE;
  self->chains_built = TRUE;
  gboolean ok = TRUE;
  if (passes_through(element)) {
    ok = build_encoded_chain(self);
  } else {
    if (has_pad(element, "video")) ok = build_raw_chain(element, "video");
    if (ok && has_pad(element, "audio")) ok = build_raw_chain(element, "audio");
  }
  return ok;
}

static GstPad *pcast_sink_request_new_pad(GstElement *element, GstPadTemplate *templ, const gchar *unused, const GstCaps *caps) {
  PCastSink *self = PCAST_SINK(element);
  const gchar *kind = GST_PAD_TEMPLATE_NAME_TEMPLATE(templ);
  gboolean video = g_str_has_prefix(kind, "video");
  if (video ? (has_pad(element, "video") || has_pad(element, "video_h264"))
            : (has_pad(element, "audio") || has_pad(element, "audio_opus"))) {
    GST_WARNING_OBJECT(element, "pcastsink has one video pad (raw or H.264) and one audio pad (raw or Opus)");
    return NULL;
  }
  // The passthrough's muxer takes its inputs as the element starts.
  if (self->chains_built && (g_str_has_suffix(kind, "_h264") || g_str_has_suffix(kind, "_opus") || passes_through(element))) {
    GST_WARNING_OBJECT(element, "pcastsink: with a passed-through pad, every pad is requested before the element starts");
    return NULL;
  }
  GstElement *queue = make(element, "queue", kind, "-queue");
  if (!queue) return NULL;
  // A few buffers of slack, not leaky: a file's demuxer must wait while the sink prerolls (a
  // leaky queue let it race through the whole file before PLAYING). The appsink drops instead
  // when Swift falls behind.
  g_object_set(queue, "max-size-buffers", 4, "max-size-bytes", 0, "max-size-time", (guint64)0, NULL);
  GstPad *target = gst_element_get_static_pad(queue, "sink");
  GstPad *ghost = gst_ghost_pad_new_from_template(kind, target, templ);
  gst_object_unref(target);
  // A pad requested while the bin runs: its chain is made now, and its elements catch up.
  if (self->chains_built) build_raw_chain(element, kind);
  gst_element_sync_state_with_parent(queue);
  gst_pad_set_active(ghost, TRUE);
  gst_element_add_pad(element, ghost);
  return ghost;
}

static void pcast_sink_release_pad(GstElement *element, GstPad *pad) {
  gchar *kind = gst_pad_get_name(pad);
  gst_pad_set_active(pad, FALSE);
  gst_ghost_pad_set_target(GST_GHOST_PAD(pad), NULL);
  gst_element_remove_pad(element, pad);
  const char *suffixes[] = {"-queue", "-appsink", "-parse", "-prefer", "-convert", "-resample", "-encoder"};
  for (guint i = 0; i < G_N_ELEMENTS(suffixes); i++) {
    GstElement *found = child(element, kind, suffixes[i]);
    if (!found) continue;
    gst_element_set_locked_state(found, TRUE);
    gst_element_set_state(found, GST_STATE_NULL);
    gst_bin_remove(GST_BIN(element), found);
    gst_object_unref(found);
  }
  g_free(kind);
}

static GstStateChangeReturn pcast_sink_change_state(GstElement *element, GstStateChange transition) {
  PCastSink *self = PCAST_SINK(element);
  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
    GST_OBJECT_LOCK(self);
    PCastSinkSettings settings = {
      .server = g_strdup(self->server), .auth_token = g_strdup(self->auth_token), .token = g_strdup(self->token),
      .tags = g_strdup(self->tags), .stream_name = g_strdup(self->stream_name),
      .publish_type = g_strdup(self->publish_type), .video_bitrate = self->video_bitrate,
      .video_codec = g_strdup(self->video_codec),
    };
    GST_OBJECT_UNLOCK(self);
    settings.passthrough = passes_through(element);
    settings.has_video = has_pad(element, "video") || has_pad(element, "video_h264");
    settings.has_audio = has_pad(element, "audio") || has_pad(element, "audio_opus");
    if (!build_chains(self)) {
      g_free((gchar *)settings.server); g_free((gchar *)settings.auth_token); g_free((gchar *)settings.token);
      g_free((gchar *)settings.tags); g_free((gchar *)settings.stream_name); g_free((gchar *)settings.publish_type);
      g_free((gchar *)settings.video_codec);
      GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("pcastsink could not link its internal elements"), (NULL));
      return GST_STATE_CHANGE_FAILURE;
    }
    gboolean started = pcast_swift_sink_start(self->swift, &settings);
    g_free((gchar *)settings.server); g_free((gchar *)settings.auth_token); g_free((gchar *)settings.token);
    g_free((gchar *)settings.tags); g_free((gchar *)settings.stream_name); g_free((gchar *)settings.publish_type);
      g_free((gchar *)settings.video_codec);
    if (!started) return GST_STATE_CHANGE_FAILURE;  // Swift posted the error
  }
  GstStateChangeReturn result = GST_ELEMENT_CLASS(pcast_sink_parent_class)->change_state(element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY ||
      (transition == GST_STATE_CHANGE_READY_TO_PAUSED && result == GST_STATE_CHANGE_FAILURE)) {
    pcast_swift_sink_stop(self->swift);
  }
  return result;
}

static void pcast_sink_finalize(GObject *object) {
  PCastSink *self = PCAST_SINK(object);
  pcast_swift_sink_free(self->swift);
  g_free(self->server); g_free(self->auth_token); g_free(self->token); g_free(self->tags);
  g_free(self->stream_name); g_free(self->publish_type); g_free(self->stream_id); g_free(self->video_codec);
  G_OBJECT_CLASS(pcast_sink_parent_class)->finalize(object);
}

static void pcast_sink_class_init(PCastSinkClass *klass) {
  GObjectClass *object_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  object_class->set_property = pcast_sink_set_property;
  object_class->get_property = pcast_sink_get_property;
  object_class->finalize = pcast_sink_finalize;
  const GParamFlags settable = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY;
  props[PROP_SERVER] = g_param_spec_string("server", "Server", "The platform's signaling URL (ws://host:port/ws)", NULL, settable);
  props[PROP_AUTH_TOKEN] = g_param_spec_string("auth-token", "Auth token", "Authentication token for the platform session", NULL, settable);
  props[PROP_TOKEN] = g_param_spec_string("token", "Publish token", "Publish token (streamToken) for the stream", NULL, settable);
  props[PROP_TAGS] = g_param_spec_string("tags", "Tags", "Comma-separated tags kept with the stream (channelAlias:NAME, …)", NULL, settable);
  props[PROP_PUBLISH_TYPE] = g_param_spec_string("publish-type", "Publish type", "live, record (a recording named stream-name) or append (to it)", "live", settable);
  props[PROP_STREAM_NAME] = g_param_spec_string("stream-name", "Stream name", "Name of the recording (record / append)", NULL, settable);
  props[PROP_VIDEO_BITRATE] = g_param_spec_uint("video-bitrate", "Video bitrate", "H.264 bitrate in kbit/s (0: the SDK's default)", 0, 100000, 0, settable);
  props[PROP_VIDEO_CODEC] = g_param_spec_string("video-codec", "Video codec", "The codec raw video is encoded in: h264, vp8, vp9 or av1 (passed-through video is H.264)", "h264", settable);
  props[PROP_STREAM_ID] = g_param_spec_string("stream-id", "Stream id", "The stream's id, once published", NULL, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties(object_class, N_PROPS, props);
  gst_element_class_add_static_pad_template(element_class, &video_template);
  gst_element_class_add_static_pad_template(element_class, &audio_template);
  gst_element_class_add_static_pad_template(element_class, &h264_template);
  gst_element_class_add_static_pad_template(element_class, &opus_template);
  gst_element_class_set_static_metadata(element_class, "PCast publisher", "Sink/Network",
      "Publishes to a PCast platform: raw video and audio (encoded by the PCastKit SDK: H.264, Opus), or H.264 "
      "and Opus passed through untouched (pads video_h264, audio_opus; a raw pad beside them is encoded in the bin); "
      "posts pcast-stream-published and pcast-data-quality element messages; EOS ends the stream as ended",
      "PCastKit engineers");
  element_class->request_new_pad = GST_DEBUG_FUNCPTR(pcast_sink_request_new_pad);
  element_class->release_pad = GST_DEBUG_FUNCPTR(pcast_sink_release_pad);
  element_class->change_state = GST_DEBUG_FUNCPTR(pcast_sink_change_state);
  GST_DEBUG_CATEGORY_INIT(pcast_sink_debug, "pcastsink", 0, "PCast publisher");
}

static void pcast_sink_init(PCastSink *self) {
  GST_OBJECT_FLAG_SET(self, GST_ELEMENT_FLAG_SINK);
  self->publish_type = g_strdup("live");
  self->swift = pcast_swift_sink_new(GST_ELEMENT(self));
}

void pcast_element_stream_published(GstElement *element, const char *stream_id) {
  if (PCAST_IS_SINK(element)) {
    PCastSink *self = PCAST_SINK(element);
    GST_OBJECT_LOCK(self);
    g_free(self->stream_id);
    self->stream_id = g_strdup(stream_id);
    GST_OBJECT_UNLOCK(self);
    g_object_notify_by_pspec(G_OBJECT(self), props[PROP_STREAM_ID]);
  }
  pcast_element_post(element, "pcast-stream-published", "stream-id", stream_id, NULL, NULL);
}
