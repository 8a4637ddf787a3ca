#!/usr/bin/python3
"""An RTSP server for the camera tests, from Debian's GStreamer
(gir1.2-gst-rtsp-server-1.0, python3-gi): serves each H.264 Matroska file
given as NAME=FILE at rtsp://127.0.0.1:PORT/NAME, in real time, as a camera
would. Prints "ready" once it listens; runs until killed.

usage: rtsp-server.py PORT NAME=FILE [NAME=FILE ...]
"""
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

Gst.init(None)
port, mounts = sys.argv[1], sys.argv[2:]
server = GstRtspServer.RTSPServer()
server.set_address("127.0.0.1")
server.set_service(port)
for mount in mounts:
    name, path = mount.split("=", 1)
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(f"( filesrc location={path} ! matroskademux ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=1 )")
    # One playback for every client, as a camera has one picture.
    factory.set_shared(True)
    server.get_mount_points().add_factory(f"/{name}", factory)
if server.attach(None) == 0:
    sys.exit(f"cannot listen on port {port}")
print("ready", flush=True)
GLib.MainLoop().run()
