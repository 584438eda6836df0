// Command interop-go-plugin is a minimal Nomad task driver written in Go with hashicorp/go-plugin
// and grpc-go, the stack real Nomad plugins are built on, so @nomadkit/client (the host side) meets
// a Go peer: go-plugin's handshake line, its unix socket in $TMPDIR, its own AutoMTLS certificate,
// its hclog JSON on stderr and its GRPCController.Shutdown. tools/test/interop-go-plugin.test.ts
// builds it with tools/go/build.sh and drives it with launchPlugin, reattachPlugin and the CLI.
//
// It serves BasePlugin (PluginInfo, ConfigSchema, SetConfig) and a few Driver calls
// (TaskConfigSchema, Capabilities, Fingerprint) without generated code: messages are dynamicpb
// from the descriptor set of proto/ named by NOMADKIT_GO_FAKE_DESCRIPTORS (see pb.go).
package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"sync"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"nomadkit/nomad"
)

// What the plugin prints on stdout after the handshake (and on stderr outside hclog), as the
// GRPCStdio stream carries it; see stdio below.
const (
	stdoutLine = "go-fake: hello on stdout\n"
	stderrLine = "go-fake: hello on stderr\n"
)

var logger hclog.Logger

func main() {
	// Like Nomad's plugins.Serve: hclog JSON on the real stderr, which go-plugin hosts parse. It
	// must be made before plugin.Serve, which points os.Stderr at a pipe of its own.
	logger = hclog.New(&hclog.LoggerOptions{Name: "go-fake", Level: hclog.Trace, JSONFormat: true, Output: os.Stderr})
	// A run without the cookie (by hand) gets go-plugin's own message: check it before our setup.
	if os.Getenv(nomad.Handshake.MagicCookieKey) == nomad.Handshake.MagicCookieValue {
		path := os.Getenv("NOMADKIT_GO_FAKE_DESCRIPTORS")
		if path == "" {
			fmt.Fprintln(os.Stderr, "go-fake: NOMADKIT_GO_FAKE_DESCRIPTORS must name a descriptor set of proto/ (buf build -o)")
			os.Exit(2)
		}
		if err := loadDescriptors(path); err != nil {
			fmt.Fprintln(os.Stderr, "go-fake:", err)
			os.Exit(2)
		}
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: nomad.Handshake,
		Plugins:         map[string]plugin.Plugin{"base": basePlugin{}, "driver": driverPlugin{}},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          logger,
	})
	logger.Info("plugin server stopped")
}

// The config SetConfig received, reported back in the fingerprint so a host can see it arrived.
var config struct {
	sync.Mutex
	msgpack []byte
}

type basePlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (basePlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (interface{}, error) {
	return nil, fmt.Errorf("go-fake is a plugin, not a host")
}

func (basePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	return register(s, "hashicorp.nomad.plugins.base.proto.BasePlugin", map[string]unaryFunc{
		"PluginInfo": func(context.Context, pm) (fields, error) {
			return fields{"type": "DRIVER", "pluginApiVersions": []string{nomad.APIVersion}, "pluginVersion": "0.1.0", "name": "go-fake"}, nil
		},
		"ConfigSchema": func(context.Context, pm) (fields, error) {
			return fields{"spec": objectSpec(fields{"greeting": attrSpec("greeting", "string", false)})}, nil
		},
		"SetConfig": func(_ context.Context, req pm) (fields, error) {
			if v := req.Str("plugin_api_version"); v != nomad.APIVersion {
				return nil, status.Errorf(codes.InvalidArgument, "go-fake speaks plugin API %s, not %q", nomad.APIVersion, v)
			}
			b := req.Bytes("msgpack_config")
			config.Lock()
			config.msgpack = append([]byte(nil), b...)
			config.Unlock()
			logger.Info("set config", "api_version", req.Str("plugin_api_version"), "config_hex", hex.EncodeToString(b))
			return fields{}, nil
		},
	}, nil)
}

type driverPlugin struct{ basePlugin }

func (driverPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	err := register(s, "hashicorp.nomad.plugins.drivers.proto.Driver", map[string]unaryFunc{
		"TaskConfigSchema": func(context.Context, pm) (fields, error) {
			return fields{"spec": objectSpec(fields{"command": attrSpec("command", "string", true)})}, nil
		},
		"Capabilities": func(context.Context, pm) (fields, error) {
			// Not the zero values, so a host that dropped the message would show.
			return fields{"capabilities": fields{"sendSignals": true, "fsIsolation": "CHROOT", "mountConfigs": "NO_MOUNTS"}}, nil
		},
	}, map[string]streamFunc{
		// One fingerprint, then held open until the host cancels, as a driver whose health never
		// changes does.
		"Fingerprint": func(ctx context.Context, _ pm, send func(fields) error) error {
			config.Lock()
			cfg := hex.EncodeToString(config.msgpack)
			config.Unlock()
			err := send(fields{
				"health":            "HEALTHY",
				"healthDescription": "go-fake is ready",
				"attributes": fields{
					"driver.go-fake":        fields{"boolVal": true},
					"driver.go-fake.config": fields{"stringVal": cfg},
				},
			})
			if err != nil {
				return err
			}
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		},
	})
	if err != nil || os.Getenv("NOMADKIT_GO_FAKE_STDIO") == "off" {
		return err
	}
	// Debian's go-plugin 1.0.1 has no GRPCStdio (go-plugin >= 1.3 serves it and copies the
	// plugin's redirected stdout/stderr into it); without it a host only learns that the service is
	// Unimplemented (NOMADKIT_GO_FAKE_STDIO=off keeps it so). Served here as go-plugin >= 1.3 would
	// for a plugin that printed stdoutLine and stderrLine, so the host's forwarding meets grpc-go.
	return register(s, "plugin.GRPCStdio", nil, map[string]streamFunc{
		"StreamStdio": func(ctx context.Context, _ pm, send func(fields) error) error {
			if err := send(fields{"channel": "STDOUT", "data": []byte(stdoutLine)}); err != nil {
				return err
			}
			if err := send(fields{"channel": "STDERR", "data": []byte(stderrLine)}); err != nil {
				return err
			}
			<-ctx.Done()
			return nil
		},
	})
}

func objectSpec(attrs fields) fields { return fields{"object": fields{"attributes": attrs}} }

func attrSpec(name, typ string, required bool) fields {
	return fields{"Attr": fields{"name": name, "type": typ, "required": required}}
}
