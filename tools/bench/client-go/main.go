// Command client-go is the bench's second client: grpc-go, the client stack Nomad uses, dialled the
// way go-plugin dials a plugin (unix socket, plaintext, no message size limits, grpc-go's own flow
// control). Two modes:
//   - exec: ExecTaskStreaming of `head -c <bytes> /dev/zero`, the protocol checked like the Node
//     client does it (all stdout bytes, no stderr, each close marker once after its data, exactly
//     one exited with code 0, last, then status OK); the request side is never half-closed, as
//     Nomad never does. One JSON line per run; exit 1 naming the first protocol error.
//   - unary: InspectTask calls kept in flight on one connection; a "counting" line when the
//     counted window starts, a JSON result when it ends.
//
// Messages are not decoded into Go structs: a codec hands over each message's bytes and protowire
// reads their fields, so the client costs little and the server is what is timed.
// Built by tools/go/build.sh; run by tools/bench/lib/go-client.mjs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	execMethod    = "/hashicorp.nomad.plugins.drivers.proto.Driver/ExecTaskStreaming"
	inspectMethod = "/hashicorp.nomad.plugins.drivers.proto.Driver/InspectTask"
)

// rawCodec passes message bytes through: requests are built with protowire, responses parsed with it.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*v.(*[]byte) = data
	return nil
}

// setupMessage is ExecTaskStreamingRequest{setup: {task_id, command, tty: false}}.
func setupMessage(taskID string, command []string) []byte {
	var s []byte
	s = protowire.AppendTag(s, 1, protowire.BytesType)
	s = protowire.AppendString(s, taskID)
	for _, c := range command {
		s = protowire.AppendTag(s, 2, protowire.BytesType)
		s = protowire.AppendString(s, c)
	}
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.BytesType)
	return protowire.AppendBytes(m, s)
}

type result struct {
	Seconds          float64 `json:"seconds"`
	Bytes            int64   `json:"bytes"`
	Messages         int     `json:"messages"`
	ClientCPUSeconds float64 `json:"clientCpuSeconds"`
}

// session holds what one exec has received so far.
type session struct {
	stdout, stderr             int64
	stdoutClosed, stderrClosed bool
	exited                     int
	exitCode                   int64
	messages                   int
}

// ioOp reads an ExecTaskStreamingIOOperation {data = 1, close = 2}.
func ioOp(b []byte) (data int, closed bool, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return 0, false, protowire.ParseError(m)
			}
			data += len(v)
			n = m
		case num == 2 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, false, protowire.ParseError(m)
			}
			closed = v != 0
			n = m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, false, protowire.ParseError(n)
			}
		}
		b = b[n:]
	}
	return data, closed, nil
}

// exitCode reads ExitResult {exit_code = 1}.
func exitCode(b []byte) (int64, error) {
	var code int64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, protowire.ParseError(m)
			}
			code = int64(int32(v))
			n = m
		} else if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return code, nil
}

// take checks one ExecTaskStreamingResponse {stdout = 1, stderr = 2, exited = 3, result = 4}.
func (s *session) take(b []byte) error {
	s.messages++
	if s.exited > 0 {
		return errors.New("a message after exited")
	}
	exited := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			data, closed, err := ioOp(v)
			if err != nil {
				return err
			}
			count, done, name := &s.stdout, &s.stdoutClosed, "stdout"
			if num == 2 {
				count, done, name = &s.stderr, &s.stderrClosed, "stderr"
			}
			if data > 0 && *done {
				return fmt.Errorf("%s data after its close marker", name)
			}
			*count += int64(data)
			if closed {
				if *done {
					return fmt.Errorf("second %s close marker", name)
				}
				*done = true
			}
			n = m
		case num == 3 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			exited = v != 0
			n = m
		case num == 4 && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			code, err := exitCode(v)
			if err != nil {
				return err
			}
			s.exitCode = code
			n = m
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
		}
		b = b[n:]
	}
	if exited {
		if !s.stdoutClosed || !s.stderrClosed {
			return errors.New("exited before both close markers")
		}
		s.exited++
	}
	return nil
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func run(conn *grpc.ClientConn, taskID string, bytes int64, timeout time.Duration) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	// Nomad ends an exec by cancelling its context, never by half-closing.
	defer cancel()
	t0, cpu0 := time.Now(), cpuSeconds()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, execMethod, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return nil, err
	}
	setup := setupMessage(taskID, []string{"head", "-c", strconv.FormatInt(bytes, 10), "/dev/zero"})
	if err := st.SendMsg(&setup); err != nil && err != io.EOF {
		return nil, fmt.Errorf("send setup: %v", err)
	}
	s := &session{}
	for {
		var msg []byte
		err := st.RecvMsg(&msg)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("status %s", status.Convert(err).Proto().String())
		}
		if err := s.take(msg); err != nil {
			return nil, fmt.Errorf("after %d messages: %v", s.messages, err)
		}
	}
	seconds, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	switch {
	case s.exited != 1:
		return nil, fmt.Errorf("%d exited messages (want exactly 1)", s.exited)
	case s.exitCode != 0:
		return nil, fmt.Errorf("exit code %d", s.exitCode)
	case s.stdout != bytes:
		return nil, fmt.Errorf("got %d stdout bytes, expected %d", s.stdout, bytes)
	case s.stderr != 0:
		return nil, fmt.Errorf("got %d stderr bytes", s.stderr)
	}
	return &result{Seconds: seconds, Bytes: s.stdout, Messages: s.messages, ClientCPUSeconds: cpu}, nil
}

// firstBytes reads the first field `num` of message b holding bytes (a string or a nested message).
func firstBytes(b []byte, num protowire.Number) ([]byte, bool) {
	for len(b) > 0 {
		n, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return nil, false
		}
		b = b[m:]
		if n == num && typ == protowire.BytesType {
			v, k := protowire.ConsumeBytes(b)
			return v, k >= 0
		}
		if m = protowire.ConsumeFieldValue(n, typ, b); m < 0 {
			return nil, false
		}
		b = b[m:]
	}
	return nil, false
}

type unaryResult struct {
	CallsPerSec      float64 `json:"callsPerSec"`
	Calls            int64   `json:"calls"`
	Seconds          float64 `json:"seconds"`
	ClientCPUSeconds float64 `json:"clientCpuSeconds"`
}

// unary keeps `concurrency` InspectTask calls in flight on one connection: `warmup` first, then
// `seconds` counted. A "counting" line on stdout marks the start of the counted window, so the
// bench can read the server's CPU time around it; the result line marks its end.
func unary(conn *grpc.ClientConn, taskID string, concurrency int, warmup, seconds time.Duration, out *json.Encoder) error {
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, taskID)
	// No deadline, as Nomad calls InspectTask (a deadline would add grpc-timeout and a server timer
	// to every call); the bench kills this process if it hangs.
	call := func() ([]byte, error) {
		var reply []byte
		err := conn.Invoke(context.Background(), inspectMethod, &req, &reply, grpc.ForceCodec(rawCodec{}))
		return reply, err
	}
	// Sanity: InspectTaskResponse{task: TaskStatus{id}} names the task.
	first, err := call()
	if err != nil {
		return fmt.Errorf("InspectTask: %v", err)
	}
	if task, ok := firstBytes(first, 1); !ok {
		return errors.New("InspectTask reply without task")
	} else if id, _ := firstBytes(task, 1); string(id) != taskID {
		return fmt.Errorf("InspectTask answered for %q", id)
	}
	var counting, stop int32
	var calls int64
	errs := make(chan error, concurrency)
	for i := 0; i < concurrency; i++ {
		go func() {
			for atomic.LoadInt32(&stop) == 0 {
				if _, err := call(); err != nil {
					errs <- err
					return
				}
				if atomic.LoadInt32(&counting) == 1 {
					atomic.AddInt64(&calls, 1)
				}
			}
			errs <- nil
		}()
	}
	time.Sleep(warmup)
	_ = out.Encode(map[string]string{"phase": "counting"})
	t0, cpu0 := time.Now(), cpuSeconds()
	atomic.StoreInt32(&counting, 1)
	time.Sleep(seconds)
	atomic.StoreInt32(&counting, 0)
	n, elapsed, cpu := atomic.LoadInt64(&calls), time.Since(t0).Seconds(), cpuSeconds()-cpu0
	atomic.StoreInt32(&stop, 1)
	for i := 0; i < concurrency; i++ {
		if err := <-errs; err != nil {
			return fmt.Errorf("InspectTask: %v", err)
		}
	}
	return out.Encode(&unaryResult{CallsPerSec: float64(n) / elapsed, Calls: n, Seconds: elapsed, ClientCPUSeconds: cpu})
}

func main() {
	socket := flag.String("socket", "", "the plugin's unix socket (required)")
	taskID := flag.String("task", "", "task ID of the exec's setup message")
	bytes := flag.Int64("bytes", 1<<30, "output size: head -c <bytes> /dev/zero")
	runs := flag.Int("runs", 1, "exec sessions, one after the other on one connection")
	timeout := flag.Duration("timeout", 10*time.Minute, "deadline of each exec session")
	mode := flag.String("mode", "exec", "exec: ExecTaskStreaming sessions; unary: InspectTask rate")
	concurrency := flag.Int("concurrency", 16, "unary: calls in flight")
	warmup := flag.Duration("warmup", 3*time.Second, "unary: time before counting")
	seconds := flag.Duration("seconds", 3*time.Second, "unary: counted time")
	window := flag.Int("window", 0, "stream receive window in bytes, the connection's 4x (0: grpc-go's default, sized from its BDP estimate, as Nomad gets)")
	flag.Parse()
	if *socket == "" || flag.NArg() > 0 || (*mode != "exec" && *mode != "unary") {
		fmt.Fprintln(os.Stderr, "usage: client-go -socket PATH [-task ID] [-mode exec|unary] [-bytes N] [-runs N] [-concurrency N] [-warmup D] [-seconds D]")
		os.Exit(2)
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
		fmt.Fprintln(os.Stderr, "client-go: dial:", err)
		os.Exit(1)
	}
	defer conn.Close()
	out := json.NewEncoder(os.Stdout)
	if *mode == "unary" {
		if err := unary(conn, *taskID, *concurrency, *warmup, *seconds, out); err != nil {
			fmt.Fprintln(os.Stderr, "client-go: unary:", err)
			os.Exit(1)
		}
		return
	}
	for i := 0; i < *runs; i++ {
		r, err := run(conn, *taskID, *bytes, *timeout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "client-go: exec %d: %v\n", i+1, err)
			os.Exit(1)
		}
		_ = out.Encode(r)
	}
}
