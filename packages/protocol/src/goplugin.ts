/**
 * hashicorp/go-plugin's own services (package `plugin`): GRPCController, GRPCStdio and GRPCBroker.
 * @module
 */
export * from "./gen/plugin/grpc_broker_pb.js";
export * from "./gen/plugin/grpc_controller_pb.js";
export * from "./gen/plugin/grpc_stdio_pb.js";
