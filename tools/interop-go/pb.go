package main

// Protobuf without generated code: the message and service descriptors come from a buf image of
// the repo's proto/ (built by run.sh), messages are dynamicpb, requests are written as protojson
// maps. grpc-go's default codec in Debian's grpc 1.33 marshals through golang/protobuf 1.3, which
// cannot handle dynamicpb, so every call forces a codec backed by google.golang.org/protobuf.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"nomadkit/descriptors"
)

var files *protoregistry.Files

// Short service names used in call sites ("Driver.StartTask").
var services = map[string]string{
	"Base":       "hashicorp.nomad.plugins.base.proto.BasePlugin",
	"Driver":     "hashicorp.nomad.plugins.drivers.proto.Driver",
	"Health":     "grpc.health.v1.Health",
	"Stdio":      "plugin.GRPCStdio",
	"Controller": "plugin.GRPCController",
}

// loadDescriptors reads a buf image of proto/ and checks that it has the services called here.
func loadDescriptors(path string) error {
	var err error
	if files, err = descriptors.Load(path); err != nil {
		return err
	}
	for short, full := range services {
		if _, err := files.FindDescriptorByName(protoreflect.FullName(full)); err != nil {
			return fmt.Errorf("%s: service %s (%s) missing: %v", path, short, full, err)
		}
	}
	return nil
}

type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }
func (protoCodec) Marshal(v interface{}) ([]byte, error) {
	return proto.Marshal(v.(proto.Message))
}
func (protoCodec) Unmarshal(b []byte, v interface{}) error {
	return proto.Unmarshal(b, v.(proto.Message))
}

var forceCodec = grpc.ForceCodec(protoCodec{})

func method(name string) protoreflect.MethodDescriptor {
	dot := strings.LastIndexByte(name, '.')
	svc, ok := services[name[:dot]]
	if !ok {
		panic("unknown service in " + name)
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		panic(err)
	}
	m := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name[dot+1:]))
	if m == nil {
		panic("unknown method " + name)
	}
	return m
}

func methodPath(m protoreflect.MethodDescriptor) string {
	return "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
}

// build makes a message of descriptor d from a protojson-shaped map (nil: empty message).
func build(d protoreflect.MessageDescriptor, fields map[string]interface{}) *dynamicpb.Message {
	m := dynamicpb.NewMessage(d)
	if fields == nil {
		return m
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	if err := protojson.Unmarshal(raw, m); err != nil {
		panic(fmt.Sprintf("building %s from %s: %v", d.FullName(), raw, err))
	}
	return m
}

// call runs a unary RPC ("Driver.Capabilities") with a request given as a protojson map.
func call(ctx context.Context, conn *grpc.ClientConn, name string, req map[string]interface{}) (pm, error) {
	m := method(name)
	resp := dynamicpb.NewMessage(m.Output())
	err := conn.Invoke(ctx, methodPath(m), build(m.Input(), req), resp, forceCodec)
	return pm{resp}, err
}

// stream opens a streaming RPC; server-streaming ones get their single request sent and closed.
func stream(ctx context.Context, conn *grpc.ClientConn, name string, req map[string]interface{}) (*rpcStream, error) {
	m := method(name)
	desc := &grpc.StreamDesc{StreamName: string(m.Name()), ServerStreams: m.IsStreamingServer(), ClientStreams: m.IsStreamingClient()}
	cs, err := conn.NewStream(ctx, desc, methodPath(m), forceCodec)
	if err != nil {
		return nil, err
	}
	s := &rpcStream{cs: cs, m: m}
	if !m.IsStreamingClient() {
		if err := cs.SendMsg(build(m.Input(), req)); err != nil {
			return nil, err
		}
		if err := cs.CloseSend(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

type rpcStream struct {
	cs grpc.ClientStream
	m  protoreflect.MethodDescriptor
}

func (s *rpcStream) Send(req map[string]interface{}) error {
	return s.cs.SendMsg(build(s.m.Input(), req))
}

func (s *rpcStream) Recv() (pm, error) {
	resp := dynamicpb.NewMessage(s.m.Output())
	err := s.cs.RecvMsg(resp)
	return pm{resp}, err
}

// pm reads a (possibly absent) message by field name; absent parts read as zero values.
type pm struct{ m protoreflect.Message }

func (p pm) fd(name string) protoreflect.FieldDescriptor {
	f := p.m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if f == nil {
		panic(fmt.Sprintf("%s has no field %s", p.m.Descriptor().FullName(), name))
	}
	return f
}

func (p pm) Valid() bool { return p.m != nil }

func (p pm) Has(name string) bool { return p.m != nil && p.m.Has(p.fd(name)) }

func (p pm) Msg(name string) pm {
	if !p.Has(name) {
		return pm{}
	}
	return pm{p.m.Get(p.fd(name)).Message()}
}

func (p pm) Str(name string) string {
	if p.m == nil {
		return ""
	}
	return p.m.Get(p.fd(name)).String()
}

func (p pm) Bytes(name string) []byte {
	if p.m == nil {
		return nil
	}
	return p.m.Get(p.fd(name)).Bytes()
}

func (p pm) Bool(name string) bool {
	if p.m == nil {
		return false
	}
	return p.m.Get(p.fd(name)).Bool()
}

func (p pm) Int(name string) int64 {
	if p.m == nil {
		return 0
	}
	f := p.fd(name)
	v := p.m.Get(f)
	switch f.Kind() {
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return int64(v.Uint())
	case protoreflect.EnumKind:
		return int64(v.Enum())
	}
	return v.Int()
}

// Enum returns the value's name, or its number when the descriptor doesn't know it.
func (p pm) Enum(name string) string {
	f := p.fd(name)
	n := protoreflect.EnumNumber(0)
	if p.m != nil {
		n = p.m.Get(f).Enum()
	}
	if v := f.Enum().Values().ByNumber(n); v != nil {
		return string(v.Name())
	}
	return fmt.Sprint(n)
}

func (p pm) Strs(name string) []string {
	if p.m == nil {
		return nil
	}
	l := p.m.Get(p.fd(name)).List()
	out := make([]string, l.Len())
	for i := range out {
		out[i] = l.Get(i).String()
	}
	return out
}

func (p pm) Len(name string) int {
	if p.m == nil {
		return 0
	}
	f := p.fd(name)
	if f.IsMap() {
		return p.m.Get(f).Map().Len()
	}
	return p.m.Get(f).List().Len()
}

func (p pm) JSON() string {
	if p.m == nil {
		return "null"
	}
	b, err := protojson.Marshal(p.m.Interface())
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	// protojson randomises whitespace; compact it so output is stable and short.
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return string(b)
	}
	return out.String()
}

// errText renders a gRPC error as "Code: message" plus the type URLs of any status details.
func errText(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	s := fmt.Sprintf("%s: %s", st.Code(), st.Message())
	for _, d := range st.Proto().GetDetails() {
		s += " [detail " + d.GetTypeUrl() + "]"
	}
	return s
}
