// Command client-go is the bench's second client: grpc-go, the client stack Nomad uses, dialled the
// way go-plugin dials a plugin (unix socket, plaintext, no message size limits, grpc-go's own flow
// control). Three modes:
//   - exec: ExecTaskStreaming of `head -c <bytes> /dev/zero`, the protocol checked like the Node
//     client does it (all stdout bytes, no stderr, each close marker once after its data, exactly
//     one exited with code 0, last, then status OK); the request side is never half-closed, as
//     Nomad never does. One JSON line per run; exit 1 naming the first protocol error.
//   - unary: InspectTask calls kept in flight on one connection; a "counting" line when the
//     counted window starts, a JSON result when it ends.
//   - startup: Nomad's load launch through go-plugin's Client (spawn, handshake, PluginInfo, Kill),
//     timed next to `node -e 0` and a floor plugin; medians as one JSON line.
//
// Messages are not decoded into Go structs: a codec hands over each message's bytes and protowire
// reads their fields, so the client costs little and the server is what is timed.
// Built by tools/go/build.sh; run by tools/bench/lib/go-client.mjs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

// envList collects repeated KEY=VALUE flags.
type envList []string

func (e *envList) String() string { return strings.Join(*e, " ") }

func (e *envList) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q: want KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "client-go: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	mode := flag.String("mode", "exec", "exec: ExecTaskStreaming sessions; unary: InspectTask rate; startup: go-plugin load launches")
	socket := flag.String("socket", "", "exec, unary: the plugin's unix socket")
	taskID := flag.String("task", "", "exec, unary: the task's ID")
	bytes := flag.Int64("bytes", 1<<30, "exec: output size, head -c <bytes> /dev/zero")
	runs := flag.Int("runs", 1, "exec: sessions one after the other on one connection; startup: rounds")
	timeout := flag.Duration("timeout", 10*time.Minute, "exec: deadline of each session")
	window := flag.Int("window", 0, "exec, unary: stream receive window in bytes, the connection's 4x (0: grpc-go's default, sized from its BDP estimate, as Nomad gets)")
	concurrency := flag.Int("concurrency", 16, "unary: calls in flight")
	warmup := flag.Duration("warmup", 3*time.Second, "unary: time before counting")
	seconds := flag.Duration("seconds", 3*time.Second, "unary: counted time")
	deadline := flag.Duration("deadline", 0, "unary: each call's deadline (0: none, as Nomad calls InspectTask)")
	pluginPath := flag.String("plugin", "", "startup: the plugin executable")
	node := flag.String("node", "node", "startup: the node binary timed as `node -e 0`")
	floor := flag.String("floor", "", "startup: a floor plugin executable timed the same way (optional)")
	var floorEnv envList
	flag.Var(&floorEnv, "floor-env", "startup: KEY=VALUE added to the floor plugin's environment (repeatable)")
	flag.Parse()
	usage := func() {
		fmt.Fprintln(os.Stderr, "usage: client-go [-mode exec|unary] -socket PATH -task ID [flags]\n       client-go -mode startup -plugin PATH [-node PATH] [-floor PATH [-floor-env K=V]] [-runs N]")
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	switch {
	case flag.NArg() > 0:
		usage()
	case *mode == "startup":
		if *pluginPath == "" || *runs < 1 {
			usage()
		}
		if err := startup(*pluginPath, *node, *floor, floorEnv, *runs, out); err != nil {
			fail("startup: %v", err)
		}
		return
	case *mode != "exec" && *mode != "unary", *socket == "":
		usage()
	}
	// As go-plugin dials a plugin (dialGRPCConn): a custom unix dialer, plaintext, no size limits.
	opts := []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", *socket)
		}),
		grpc.FailOnNonTempDialError(true),
		grpc.WithInsecure(),
		grpc.WithBlock(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31-1), grpc.MaxCallSendMsgSize(1<<31-1)),
	}
	if *window > 0 {
		// Fixed windows turn grpc-go's BDP estimation off.
		opts = append(opts, grpc.WithInitialWindowSize(int32(*window)), grpc.WithInitialConnWindowSize(int32(4**window)))
	}
	conn, err := grpc.Dial("unused", opts...)
	if err != nil {
		fail("dial: %v", err)
	}
	defer conn.Close()
	if *mode == "unary" {
		if err := unary(conn, *taskID, *concurrency, *warmup, *seconds, *deadline, out); err != nil {
			fail("unary: %v", err)
		}
		return
	}
	for i := 0; i < *runs; i++ {
		r, err := run(conn, *taskID, *bytes, *timeout)
		if err != nil {
			fail("exec %d: %v", i+1, err)
		}
		_ = out.Encode(r)
	}
}

// cpuSeconds is the CPU time (user + system) this process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
