package main

// Services without generated code: descriptors come from a buf image of the repo's proto/, messages
// are dynamicpb, replies are written as protojson maps, and each service is registered with a
// grpc.ServiceDesc built at run time (as generated code would register it), so methods it does not
// list answer Unimplemented like a real Nomad plugin's.

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"nomadkit/descriptors"
)

var files *protoregistry.Files

// loadDescriptors reads a buf image of proto/.
func loadDescriptors(path string) (err error) {
	files, err = descriptors.Load(path)
	return err
}

// wire carries a dynamicpb message through grpc-go's default codec. Debian's grpc 1.33 marshals with
// golang/protobuf 1.3, which cannot handle dynamicpb, but it lets a message that implements
// Marshal/Unmarshal encode itself; that keeps the server's codec (and go-plugin's own health,
// controller and broker services) as plugin.DefaultGRPCServer makes it.
type wire struct{ m *dynamicpb.Message }

func (w wire) Reset()                   { proto.Reset(w.m) }
func (w wire) String() string           { return prototext.Format(w.m) }
func (w wire) ProtoMessage()            {}
func (w wire) Marshal() ([]byte, error) { return proto.Marshal(w.m) }
func (w wire) Unmarshal(b []byte) error { return proto.Unmarshal(b, w.m) }

// fields is a message in protojson shape.
type fields = map[string]interface{}

type unaryFunc func(ctx context.Context, req pm) (fields, error)
type streamFunc func(ctx context.Context, req pm, send func(fields) error) error

// register serves the given unary and server-streaming methods of service on s.
func register(s *grpc.Server, service string, unary map[string]unaryFunc, streams map[string]streamFunc) error {
	d, err := files.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return fmt.Errorf("service %s: %v", service, err)
	}
	sd := d.(protoreflect.ServiceDescriptor)
	desc := &grpc.ServiceDesc{ServiceName: service, HandlerType: (*interface{})(nil), Metadata: sd.ParentFile().Path()}
	method := func(name string) (protoreflect.MethodDescriptor, error) {
		m := sd.Methods().ByName(protoreflect.Name(name))
		if m == nil {
			return nil, fmt.Errorf("service %s has no method %s", service, name)
		}
		return m, nil
	}
	for name, h := range unary {
		m, err := method(name)
		if err != nil {
			return err
		}
		h := h
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: name,
			// plugin.DefaultGRPCServer installs no interceptor, so none is called.
			Handler: func(_ interface{}, ctx context.Context, dec func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
				req := dynamicpb.NewMessage(m.Input())
				if err := dec(wire{req}); err != nil {
					return nil, err
				}
				out, err := h(ctx, pm{req})
				if err != nil {
					return nil, err
				}
				return build(m.Output(), out)
			},
		})
	}
	for name, h := range streams {
		m, err := method(name)
		if err != nil {
			return err
		}
		if m.IsStreamingClient() || !m.IsStreamingServer() {
			return fmt.Errorf("%s.%s is not server-streaming", service, name)
		}
		h := h
		desc.Streams = append(desc.Streams, grpc.StreamDesc{
			StreamName:    name,
			ServerStreams: true,
			Handler: func(_ interface{}, ss grpc.ServerStream) error {
				req := dynamicpb.NewMessage(m.Input())
				if err := ss.RecvMsg(wire{req}); err != nil {
					return err
				}
				return h(ss.Context(), pm{req}, func(f fields) error {
					out, err := build(m.Output(), f)
					if err != nil {
						return err
					}
					return ss.SendMsg(out)
				})
			},
		})
	}
	s.RegisterService(desc, struct{}{})
	return nil
}

// build makes a message of descriptor d from a protojson-shaped map.
func build(d protoreflect.MessageDescriptor, f fields) (wire, error) {
	m := dynamicpb.NewMessage(d)
	raw, err := json.Marshal(f)
	if err != nil {
		return wire{}, err
	}
	if err := protojson.Unmarshal(raw, m); err != nil {
		return wire{}, fmt.Errorf("building %s from %s: %v", d.FullName(), raw, err)
	}
	return wire{m}, nil
}

// pm reads a request's fields by name.
type pm struct{ m *dynamicpb.Message }

func (p pm) fd(name string) protoreflect.FieldDescriptor {
	f := p.m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if f == nil {
		panic(fmt.Sprintf("%s has no field %s", p.m.Descriptor().FullName(), name))
	}
	return f
}

func (p pm) Str(name string) string   { return p.m.Get(p.fd(name)).String() }
func (p pm) Bytes(name string) []byte { return p.m.Get(p.fd(name)).Bytes() }
