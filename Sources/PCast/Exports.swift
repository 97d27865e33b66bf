// What `import PCast` puts in an application's namespace: the declarations of the media engine and
// of the wire formats that an SDK user types (options, streams, tracks, renderers, frames, errors,
// the PCast iOS SDK's enumerations). The rest of those modules (the RTP engine, the parsers, the signaling
// messages) stays out; an application that wants them imports the module itself.

// Capture: user media, its options and constraints, devices.
@_exported import enum PCastMedia.UserMedia
@_exported import struct PCastMedia.UserMediaOptions
@_exported import struct PCastMedia.VideoOptions
@_exported import struct PCastMedia.AudioOptions
@_exported import struct PCastMedia.Constraint
@_exported import enum PCastMedia.MediaSourceOverride
@_exported import struct PCastMedia.UserMediaError
@_exported import class PCastMedia.UserMediaStream
@_exported import typealias PCastMedia.MediaType
@_exported import enum PCastMedia.SourceDeviceType
@_exported import enum PCastMedia.FacingMode
@_exported import enum PCastMedia.FlashMode
@_exported import enum PCastMedia.DeviceLocation
@_exported import enum PCastMedia.PolarPattern
@_exported import enum PCastMedia.EchoCancelationMode
@_exported import enum PCastMedia.VideoSourceRotationMode
@_exported import enum PCastMedia.DeviceCapability
@_exported import enum PCastMedia.SourceDevices
@_exported import struct PCastMedia.SourceDeviceInfo
@_exported import struct PCastMedia.VideoMode

// Streams and tracks.
@_exported import class PCastMedia.MediaStream
@_exported import class PCastMedia.MediaStreamTrack
@_exported import enum PCastMedia.MediaStreamEndReason
@_exported import enum PCastMedia.TrackState
@_exported import class PCastMedia.MediaConsumer
@_exported import class PCastMedia.Disposable
@_exported import struct PCastMedia.MediaError

// Rendering and recording.
@_exported import class PCastMedia.Renderer
@_exported import struct PCastMedia.RendererOptions
@_exported import enum PCastMedia.RendererStartStatus
@_exported import enum PCastMedia.RenderSurface
@_exported import enum PCastMedia.AspectRatioMode
@_exported import struct PCastMedia.Dimensions
@_exported import class PCastMedia.MediaRecorder
@_exported import enum PCastMedia.RecordingMode
@_exported import struct PCastMedia.RecordingSummary

// Raw frames (the frame-ready hooks).
@_exported import typealias PCastMedia.FrameReadyCallback
@_exported import class PCastMedia.FrameNotification
@_exported import enum PCastMedia.MediaFrame
@_exported import enum PCastMedia.MediaKind
@_exported import struct PCastMedia.VideoFrame
@_exported import struct PCastMedia.AudioFrame
@_exported import typealias PCastMedia.PixelFormat
@_exported import enum PCastMedia.AudioSampleFormat

// Quality, statistics, encoding, ingest.
@_exported import struct PCastMedia.DataQuality
@_exported import enum PCastMedia.DataQualityStatus
@_exported import enum PCastMedia.DataQualityReason
@_exported import struct PCastMedia.RTCStats
@_exported import struct PCastMedia.RTCStatsReport
@_exported import struct PCastMedia.ReceivedTrackStatistics
@_exported import struct PCastMedia.EncodingSettings
@_exported import struct PCastMedia.NetworkImpairment
@_exported import enum PCastMedia.IngestSource
@_exported import struct PCastMedia.IngestOptions

// The platform's vocabulary (the PCast iOS SDK's enumerations and models).
@_exported import enum PCastProtocol.RequestStatus
@_exported import enum PCastProtocol.StreamEndedReason
@_exported import enum PCastProtocol.PublishType
@_exported import struct PCastProtocol.MediaTrackDescription
@_exported import struct PCastProtocol.SimulcastLayer
@_exported import enum PCastProtocol.RoomType
@_exported import enum PCastProtocol.MemberRole
@_exported import enum PCastProtocol.MemberState
@_exported import enum PCastProtocol.RoomStreamType
@_exported import enum PCastProtocol.RoomTrackState
@_exported import struct PCastProtocol.RoomDescription
@_exported import struct PCastProtocol.MemberDescription
@_exported import enum PCastProtocol.RoomLimits
