// Command interop-go is a Nomad-like host for nomadkit's Go interop check: it launches a task
// driver plugin through hashicorp/go-plugin and talks to it over grpc-go, the client stack Nomad
// itself uses, following the call order of PROTOCOL.md §3 (one process to load, one to validate
// the config, one to run a task). It prints one PASS/FAIL line per step and exits 1 on any
// failure. Build and run it with run.sh next to this file.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"nomadkit/nomad"
)

type options struct {
	plugin, descriptors          string
	configHex, configJSON        string
	taskConfigJSON, pluginName   string
	killSignal                   string
	expectLogOut, expectLogErr   string
	requireHealthy, verbose      bool
	exec                         bool
	startTimeout, callTimeout    time.Duration
	fingerprintTimeout, execWait time.Duration
}

func main() {
	o := &options{}
	flag.StringVar(&o.descriptors, "descriptors", "", "FileDescriptorSet / buf image of proto/ (required)")
	flag.StringVar(&o.configHex, "config-hex", "80", "SetConfig msgpack_config as hex (default: an empty msgpack map)")
	flag.StringVar(&o.configJSON, "config-json", "", "plugin config as a JSON object, encoded like Nomad against ConfigSchema (overrides -config-hex)")
	flag.StringVar(&o.taskConfigJSON, "task-config-json",
		`{"command":"/bin/sh","args":["-c","echo interop-stdout; echo interop-stderr >&2; exec sleep 600"]}`,
		"task driver config as a JSON object, encoded like Nomad against TaskConfigSchema")
	flag.StringVar(&o.expectLogOut, "expect-log-stdout", "interop-stdout\n", "text the task must write to stdout_path (empty: don't check)")
	flag.StringVar(&o.expectLogErr, "expect-log-stderr", "interop-stderr\n", "text the task must write to stderr_path (empty: don't check)")
	flag.StringVar(&o.pluginName, "plugin-name", "", "expected PluginInfo name (empty: any)")
	flag.StringVar(&o.killSignal, "kill-signal", "", "StopTask signal (Nomad sends the task's kill_signal, empty by default)")
	flag.BoolVar(&o.requireHealthy, "require-healthy", true, "the first fingerprint must report HEALTHY")
	flag.BoolVar(&o.exec, "exec", true, "run the ExecTask/ExecTaskStreaming steps (false: skip them, reported as FAIL)")
	flag.BoolVar(&o.verbose, "v", false, "print go-plugin's log, including the plugin's stderr, to stderr")
	flag.DurationVar(&o.startTimeout, "start-timeout", time.Minute, "go-plugin handshake timeout (Nomad: 1m)")
	flag.DurationVar(&o.callTimeout, "call-timeout", 30*time.Second, "deadline of each unary call")
	flag.DurationVar(&o.fingerprintTimeout, "fingerprint-timeout", 10*time.Second, "time allowed for the first fingerprint / stats sample / task output")
	flag.DurationVar(&o.execWait, "exec-timeout", 30*time.Second, "deadline of each exec session")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s -descriptors image.binpb [flags] <plugin-binary>\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || o.descriptors == "" {
		flag.Usage()
		os.Exit(2)
	}
	o.plugin = flag.Arg(0)
	if abs, err := filepath.Abs(o.plugin); err == nil {
		o.plugin = abs
	}
	if err := loadDescriptors(o.descriptors); err != nil {
		fmt.Fprintln(os.Stderr, "interop-go:", err)
		os.Exit(2)
	}

	rep := &reporter{}
	started := time.Now()
	rep.phase = "startup"
	noCookie(rep, o)
	// Like Nomad's agent start: one process to load, one to validate the config, one to run.
	st := &state{}
	if phaseLoad(rep, o, st) && phaseValidate(rep, o, st) {
		phaseRun(rep, o, st)
	}
	total := rep.passed + rep.failed
	if rep.failed > 0 {
		fmt.Printf("interop-go: %d of %d steps FAILED (%s)\n", rep.failed, total, time.Since(started).Round(time.Millisecond))
		os.Exit(1)
	}
	fmt.Printf("interop-go: all %d steps passed (%s)\n", total, time.Since(started).Round(time.Millisecond))
}

type reporter struct {
	phase          string
	passed, failed int
}

func (r *reporter) pass(step, format string, a ...interface{}) {
	r.passed++
	fmt.Printf("PASS %s/%s: %s\n", r.phase, step, fmt.Sprintf(format, a...))
}

func (r *reporter) fail(step, format string, a ...interface{}) {
	r.failed++
	fmt.Printf("FAIL %s/%s: %s\n", r.phase, step, fmt.Sprintf(format, a...))
}

// check passes or fails a step on err and returns whether it passed.
func (r *reporter) check(step string, err error, format string, a ...interface{}) bool {
	if err != nil {
		r.fail(step, "%s", errText(err))
		return false
	}
	r.pass(step, format, a...)
	return true
}

// rawPlugin hands go-plugin's *grpc.ClientConn to us: every call goes through it by method path.
type rawPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

func (rawPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }
func (rawPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	return conn, nil
}

type session struct {
	o      *options
	rep    *reporter
	client *plugin.Client
	conn   *grpc.ClientConn
	stderr *stderrSink
	host   *hostLog
	stdio  *bgStream
}

// launch starts the plugin like Nomad's plugin loader does and dials it. nil means the phase
// cannot go on (the failure is reported).
func launch(rep *reporter, o *options) *session {
	s := &session{o: o, rep: rep, stderr: &stderrSink{}, host: &hostLog{verbose: o.verbose}}
	logger := hclog.New(&hclog.LoggerOptions{Name: "interop", Level: hclog.Trace, Output: s.host})
	s.client = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  nomad.Handshake,
		Plugins:          map[string]plugin.Plugin{"base": rawPlugin{}, "driver": rawPlugin{}},
		Cmd:              exec.Command(o.plugin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           logger,
		Stderr:           s.stderr,
		StartTimeout:     o.startTimeout,
	})
	t0 := time.Now()
	rpc, err := s.client.Client()
	if err != nil {
		s.client.Kill()
		rep.fail("handshake", "%q; plugin stderr: %q", err.Error(), strings.TrimSpace(s.stderr.lastLines()))
		return nil
	}
	addr := s.client.ReattachConfig().Addr
	rep.pass("handshake", "%s %s, app protocol %d, grpc, in %s", addr.Network(), addr.String(),
		s.client.NegotiatedVersion(), time.Since(t0).Round(time.Millisecond))
	raw, err := rpc.Dispense("driver")
	if err != nil {
		rep.fail("dispense", "%v", err)
		s.client.Kill()
		return nil
	}
	s.conn = raw.(*grpc.ClientConn)
	// go-plugin >= 1.3 (Nomad's) opens the stdio stream at connect time; Debian's 1.0.1 doesn't,
	// so open it ourselves.
	s.stdio = openBg(s.conn, "Stdio.StreamStdio", nil)
	rep.check("health", rpc.Ping(), "go-plugin Ping (grpc.health.v1 Check service=%q)", plugin.GRPCServiceName)
	return s
}

func (s *session) call(name string, req map[string]interface{}) (pm, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.callTimeout)
	defer cancel()
	return call(ctx, s.conn, name, req)
}

// kill ends the session like Nomad: go-plugin's Kill calls the controller's Shutdown and
// SIGKILLs the process if it hasn't exited 2 s later.
func (s *session) kill() {
	count, err, early := s.stdio.stop()
	switch {
	case early && isCode(err, "Unimplemented"):
		s.rep.pass("GRPCStdio", "Unimplemented (Nomad's go-plugin logs a warning and carries on)")
	case early:
		s.rep.fail("GRPCStdio", "StreamStdio ended early: %s", errText(err))
	default:
		s.rep.pass("GRPCStdio", "StreamStdio held open, %d messages", count)
	}
	t0 := time.Now()
	s.client.Kill()
	d := time.Since(t0).Round(time.Millisecond)
	forced, exitErr := s.host.outcome()
	switch {
	case forced:
		s.rep.fail("Kill", "plugin did not exit within 2s of the controller Shutdown; go-plugin sent SIGKILL")
	case !s.client.Exited():
		s.rep.fail("Kill", "go-plugin does not see the process as exited")
	case exitErr != "":
		s.rep.fail("Kill", "plugin exited after Shutdown with %s", exitErr)
	default:
		s.rep.pass("Kill", "controller Shutdown, process exited cleanly in %s", d)
	}
	s.stderr.report(s.rep)
}

// noCookie runs the binary without the magic cookie: it must refuse with a message and exit 1.
func noCookie(rep *reporter, o *options) {
	ctx, cancel := context.WithTimeout(context.Background(), o.startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.plugin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, nomad.Handshake.MagicCookieKey+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	switch {
	case code != 1:
		rep.fail("no-cookie", "exit code %d (want 1; err %v), stderr %q", code, err, stderr.String())
	case stdout.Len() > 0:
		rep.fail("no-cookie", "printed %q on stdout (want nothing)", stdout.String())
	case stderr.Len() == 0:
		rep.fail("no-cookie", "exited 1 without a message on stderr")
	default:
		rep.pass("no-cookie", "exit 1, stderr %q", firstLine(stderr.String()))
	}
}
