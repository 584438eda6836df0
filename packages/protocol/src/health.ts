/**
 * The standard gRPC health service (`grpc.health.v1`); go-plugin checks service `plugin`.
 * @module
 */
export * from "./gen/grpc/health/v1/health_pb.js";
