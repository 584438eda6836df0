package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/ioutil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// stderrSink receives the plugin's raw stderr lines (go-plugin's ClientConfig.Stderr) and checks
// them the way go-plugin reads them: JSON lines with @message/@level/@timestamp become structured
// log entries; anything else is logged as debug text.
type stderrSink struct {
	mu                sync.Mutex
	buf               []byte
	lines, jsonLines  int
	problems, errLogs []string
	tail              []string // last few lines, for failure messages
}

func (s *stderrSink) lastLines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(append(append([]string(nil), s.tail...), string(s.buf)), "\n")
}

func (s *stderrSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.line(string(s.buf[:i]))
		s.buf = s.buf[i+1:]
	}
	return len(p), nil
}

func (s *stderrSink) line(l string) {
	s.lines++
	if s.tail = append(s.tail, l); len(s.tail) > 8 {
		s.tail = s.tail[1:]
	}
	var raw map[string]interface{}
	if json.Unmarshal([]byte(l), &raw) != nil || raw == nil {
		return
	}
	s.jsonLines++
	// go-plugin type-asserts these to string without checking: anything else crashes the host.
	for _, k := range []string{"@message", "@level", "@timestamp"} {
		if v, ok := raw[k]; ok {
			if _, isStr := v.(string); !isStr {
				s.problems = append(s.problems, fmt.Sprintf("%s is not a string (go-plugin would panic): %s", k, l))
				return
			}
		}
	}
	if ts, ok := raw["@timestamp"].(string); ok {
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", ts); err != nil {
			s.problems = append(s.problems, fmt.Sprintf("@timestamp %q is not 2006-01-02T15:04:05.000000Z07:00 (go-plugin drops to plain debug text): %s", ts, l))
		}
	}
	lvl, ok := raw["@level"].(string)
	switch {
	case !ok:
		s.problems = append(s.problems, "no @level: "+l)
	case hclog.LevelFromString(lvl) == hclog.NoLevel:
		s.problems = append(s.problems, fmt.Sprintf("@level %q is not trace/debug/info/warn/error: %s", lvl, l))
	case hclog.LevelFromString(lvl) == hclog.Error:
		s.errLogs = append(s.errLogs, l)
	}
}

func (s *stderrSink) report(rep *reporter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) > 0 {
		s.line(string(s.buf))
		s.buf = nil
	}
	switch {
	case len(s.problems) > 0:
		rep.fail("stderr-log", "%d of %d JSON lines go-plugin can't take as hclog, first: %s", len(s.problems), s.jsonLines, s.problems[0])
	case len(s.errLogs) > 0:
		rep.fail("stderr-log", "%d error-level lines, first: %s", len(s.errLogs), s.errLogs[0])
	default:
		rep.pass("stderr-log", "%d lines, %d hclog JSON, no error level", s.lines, s.jsonLines)
	}
}

// hostLog is go-plugin's own hclog output: it tells how Kill went and how the process exited.
type hostLog struct {
	mu       sync.Mutex
	verbose  bool
	forced   bool
	exitErr  string
	leftover []byte
}

func (h *hostLog) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.verbose {
		os.Stderr.Write(p)
	}
	h.leftover = append(h.leftover, p...)
	for {
		i := bytes.IndexByte(h.leftover, '\n')
		if i < 0 {
			break
		}
		l := string(h.leftover[:i])
		h.leftover = h.leftover[i+1:]
		if strings.Contains(l, "plugin failed to exit gracefully") {
			h.forced = true
		}
		if strings.Contains(l, "plugin process exited") {
			if j := strings.Index(l, "error="); j >= 0 {
				h.exitErr = strings.Trim(l[j+len("error="):], "\" ")
			}
		}
	}
	return len(p), nil
}

func (h *hostLog) outcome() (forced bool, exitErr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.forced, h.exitErr
}

// bgStream keeps a server-streaming call open in the background, as Nomad does with Fingerprint,
// TaskEvents and the go-plugin stdio stream.
type bgStream struct {
	cancel    context.CancelFunc
	first     chan pm
	done      chan struct{}
	mu        sync.Mutex
	count     int
	err       error
	cancelled bool
	early     bool
}

func openBg(conn *grpc.ClientConn, name string, req map[string]interface{}) *bgStream {
	ctx, cancel := context.WithCancel(context.Background())
	b := &bgStream{cancel: cancel, first: make(chan pm, 1), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		s, err := stream(ctx, conn, name, req)
		for err == nil {
			var msg pm
			msg, err = s.Recv()
			if err == nil {
				b.mu.Lock()
				b.count++
				if b.count == 1 {
					b.first <- msg
				}
				b.mu.Unlock()
			}
		}
		b.mu.Lock()
		b.err, b.early = err, !b.cancelled
		b.mu.Unlock()
	}()
	return b
}

// stop cancels the call and returns the number of messages, and the error that ended it when it
// ended before being cancelled (early).
func (b *bgStream) stop() (count int, err error, early bool) {
	b.mu.Lock()
	b.cancelled = true
	b.mu.Unlock()
	b.cancel()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.early {
		return b.count, nil, false
	}
	return b.count, b.err, true
}

func isCode(err error, code string) bool {
	return err != nil && status.Code(err).String() == code
}

type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len() < 64<<10 {
		b.Buffer.Write(p)
	}
	return len(p), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// fifoReader stands in for Nomad's logmon: it holds the task's stdout/stderr FIFO open for
// reading (read-write, so opening never blocks and a driver's open for writing succeeds).
type fifoReader struct {
	mu  sync.Mutex
	buf bytes.Buffer
	f   *os.File
}

func openFifo(path string) (*fifoReader, error) {
	if err := mkfifo(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	r := &fifoReader{f: f}
	go func() {
		chunk := make([]byte, 4096)
		for {
			n, err := f.Read(chunk)
			r.mu.Lock()
			if r.buf.Len() < 1<<20 {
				r.buf.Write(chunk[:n])
			}
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return r, nil
}

func (r *fifoReader) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

func (r *fifoReader) Close() { r.f.Close() }

// procsOf lists processes (other than us) whose environment holds kv or whose command line
// mentions dir: the task's processes and anything the driver started for it (e.g. an executor).
func procsOf(kv, dir string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cmdline, err := ioutil.ReadFile(d + "/cmdline"); err == nil && bytes.Contains(cmdline, []byte(dir)) {
			pids = append(pids, pid)
			continue
		}
		env, err := ioutil.ReadFile(d + "/environ")
		if err != nil {
			continue
		}
		for _, e := range bytes.Split(env, []byte{0}) {
			if string(e) == kv {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// waitFor polls cond until it holds or the timeout passes (for outcomes outside any RPC we can
// block on: FIFO contents, processes going away).
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }
