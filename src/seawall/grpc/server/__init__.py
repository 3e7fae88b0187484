"""The gRPC server interceptors (deadline intake, load shedding), exported by
:mod:`seawall.grpc`."""
