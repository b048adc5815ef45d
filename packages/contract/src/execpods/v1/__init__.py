"""Generated gRPC code for execpods.v1."""
