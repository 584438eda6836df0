package main

// Nomad's load launch as go-plugin runs it, timed: spawn → handshake (go-plugin's Client) →
// PluginInfo answered → Kill done (GRPCController.Shutdown, then the process's exit), next to a
// bare `node -e 0` (spawn until exit) and the same cycle of a floor plugin, alternating.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/ioutil"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

const pluginInfoMethod = "/hashicorp.nomad.plugins.base.proto.BasePlugin/PluginInfo"

// Nomad's handshake (plugins/base.Handshake).
var handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "NOMAD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255",
}

// connPlugin dispenses go-plugin's *grpc.ClientConn itself: calls go through the raw codec.
type connPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (connPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("host side only")
}

func (connPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	return conn, nil
}

type cycle struct{ total, handshake, pluginInfo, shutdown float64 }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pluginCycle launches cmd as Nomad's plugin loader does and times one load launch.
func pluginCycle(cmd *exec.Cmd) (cycle, error) {
	t0 := time.Now()
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          map[string]plugin.Plugin{"base": connPlugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
		Stderr:           ioutil.Discard,
		StartTimeout:     time.Minute,
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		return cycle{}, fmt.Errorf("handshake: %v", err)
	}
	raw, err := rpc.Dispense("base")
	if err != nil {
		return cycle{}, fmt.Errorf("dispense: %v", err)
	}
	t1 := time.Now()
	var req, reply []byte
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := raw.(*grpc.ClientConn).Invoke(ctx, pluginInfoMethod, &req, &reply, grpc.ForceCodec(rawCodec{})); err != nil {
		return cycle{}, fmt.Errorf("PluginInfo: %v", err)
	}
	t2 := time.Now()
	// PluginInfoResponse.name (field 4) must be there.
	if name, ok := firstBytes(reply, 4); !ok || len(name) == 0 {
		return cycle{}, errors.New("PluginInfo without name")
	}
	client.Kill()
	t3 := time.Now()
	if !client.Exited() {
		return cycle{}, errors.New("still running after Kill")
	}
	return cycle{ms(t3.Sub(t0)), ms(t1.Sub(t0)), ms(t2.Sub(t1)), ms(t3.Sub(t2))}, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// withEnv runs fn with the KEY=VALUE items set in this process's environment, then restores it:
// go-plugin gives a plugin the host's environment after the command's own, so only the host's
// environment can override a variable the host has.
func withEnv(items []string, fn func() (cycle, error)) (cycle, error) {
	type saved struct {
		value string
		had   bool
	}
	old := map[string]saved{}
	for _, kv := range items {
		k, v := kv[:strings.IndexByte(kv, '=')], kv[strings.IndexByte(kv, '=')+1:]
		if _, done := old[k]; !done {
			prev, had := os.LookupEnv(k)
			old[k] = saved{prev, had}
		}
		os.Setenv(k, v)
	}
	defer func() {
		for k, s := range old {
			if s.had {
				os.Setenv(k, s.value)
			} else {
				os.Unsetenv(k)
			}
		}
	}()
	return fn()
}

type startupResult struct {
	Runs       int                `json:"runs"`
	PluginMs   float64            `json:"pluginMs"`
	BareNodeMs float64            `json:"bareNodeMs"`
	FloorMs    float64            `json:"floorMs,omitempty"`
	PhasesMs   map[string]float64 `json:"phasesMs"`
}

// startup times `runs` rounds of: `node -e 0`, the plugin's cycle, the floor's cycle (when given).
// floorEnv (KEY=VALUE items) is set for the floor's launches.
func startup(pluginPath, node, floor string, floorEnv []string, runs int, out *json.Encoder) error {
	var bare, total, floorMs []float64
	phases := map[string][]float64{}
	for i := 0; i < runs; i++ {
		t0 := time.Now()
		if err := exec.Command(node, "-e", "0").Run(); err != nil {
			return fmt.Errorf("%s -e 0: %v", node, err)
		}
		bare = append(bare, ms(time.Since(t0)))
		c, err := pluginCycle(exec.Command(pluginPath))
		if err != nil {
			return fmt.Errorf("%s: %v", pluginPath, err)
		}
		total = append(total, c.total)
		phases["handshake"] = append(phases["handshake"], c.handshake)
		phases["pluginInfo"] = append(phases["pluginInfo"], c.pluginInfo)
		phases["shutdown"] = append(phases["shutdown"], c.shutdown)
		if floor != "" {
			f, err := withEnv(floorEnv, func() (cycle, error) { return pluginCycle(exec.Command(floor)) })
			if err != nil {
				return fmt.Errorf("%s: %v", floor, err)
			}
			floorMs = append(floorMs, f.total)
		}
	}
	r := startupResult{Runs: runs, PluginMs: median(total), BareNodeMs: median(bare), PhasesMs: map[string]float64{}}
	for k, v := range phases {
		r.PhasesMs[k] = median(v)
	}
	if len(floorMs) > 0 {
		r.FloorMs = median(floorMs)
	}
	return out.Encode(&r)
}
