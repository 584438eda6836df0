package main

// ExecTaskStreaming as Nomad drives it (PROTOCOL.md §6): setup first, then stdin / tty_size /
// empty heartbeat messages; the host never half-closes its side. The plugin must answer with
// output chunks, one close per stream, exactly one final exited message, then status OK.

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
)

type execPlan struct {
	command []string
	tty     bool
	first   []map[string]interface{} // sent right after setup
	trigger string                   // once stdout contains this ...
	then    []map[string]interface{} // ... send these
}

type execResult struct {
	stdout, stderr             []byte
	stdoutCloses, stderrCloses int
	exited                     int
	exitCode                   int64
	afterExit                  int      // messages received after the exited one
	problems                   []string // protocol violations seen while receiving
	err                        error    // final status; nil means OK
}

func stdinData(s string) map[string]interface{} {
	return map[string]interface{}{"stdin": map[string]interface{}{"data": base64.StdEncoding.EncodeToString([]byte(s))}}
}

var (
	stdinClose = map[string]interface{}{"stdin": map[string]interface{}{"close": true}}
	heartbeat  = map[string]interface{}{}
)

func ttySize(height, width int) map[string]interface{} {
	return map[string]interface{}{"tty_size": map[string]interface{}{"height": height, "width": width}}
}

func runExec(conn *grpc.ClientConn, taskID string, plan execPlan, timeout time.Duration) *execResult {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	// Nomad ends the call by cancelling, never by half-closing.
	defer cancel()
	r := &execResult{}
	s, err := stream(ctx, conn, "Driver.ExecTaskStreaming", nil)
	if err != nil {
		r.err = err
		return r
	}
	send := func(msgs []map[string]interface{}) {
		for _, m := range msgs {
			// io.EOF means the server already finished; RecvMsg reports the real status.
			if err := s.Send(m); err != nil && err != io.EOF {
				r.problems = append(r.problems, fmt.Sprintf("send: %v", err))
			}
		}
	}
	send([]map[string]interface{}{{"setup": map[string]interface{}{"task_id": taskID, "command": plan.command, "tty": plan.tty}}})
	send(plan.first)
	triggered := plan.trigger == ""
	for {
		msg, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			r.err = err
			break
		}
		if r.exited > 0 {
			r.afterExit++
		}
		if out := msg.Msg("stdout"); out.Valid() {
			if d := out.Bytes("data"); len(d) > 0 {
				if r.stdoutCloses > 0 {
					r.problems = append(r.problems, "stdout data after stdout close")
				}
				r.stdout = append(r.stdout, d...)
			}
			if out.Bool("close") {
				r.stdoutCloses++
			}
		}
		if e := msg.Msg("stderr"); e.Valid() {
			if d := e.Bytes("data"); len(d) > 0 {
				if r.stderrCloses > 0 {
					r.problems = append(r.problems, "stderr data after stderr close")
				}
				r.stderr = append(r.stderr, d...)
			}
			if e.Bool("close") {
				r.stderrCloses++
			}
		}
		if msg.Bool("exited") {
			r.exited++
			r.exitCode = msg.Msg("result").Int("exit_code")
		} else if msg.Has("result") {
			r.problems = append(r.problems, "result without exited=true")
		}
		if !triggered && bytes.Contains(r.stdout, []byte(plan.trigger)) {
			triggered = true
			send(plan.then)
		}
	}
	if !triggered && r.err == nil {
		r.problems = append(r.problems, fmt.Sprintf("stdout never contained %q", plan.trigger))
	}
	return r
}

// verify checks r against the expected output (nil: don't compare) and exit code.
func (r *execResult) verify(wantStdout, wantStderr []byte, wantCode int64, tty bool) []string {
	p := append([]string(nil), r.problems...)
	if r.err != nil {
		p = append(p, "final status "+errText(r.err)+" (want OK)")
	}
	if r.exited != 1 {
		p = append(p, fmt.Sprintf("%d exited messages (want exactly 1)", r.exited))
	}
	if r.afterExit > 0 {
		p = append(p, fmt.Sprintf("%d messages after exited (want it last)", r.afterExit))
	}
	if r.stdoutCloses != 1 {
		p = append(p, fmt.Sprintf("%d stdout closes (want 1)", r.stdoutCloses))
	}
	if tty {
		if r.stderrCloses > 1 {
			p = append(p, fmt.Sprintf("%d stderr closes (want at most 1 with a tty)", r.stderrCloses))
		}
		if len(r.stderr) > 0 {
			p = append(p, fmt.Sprintf("stderr data %q with a tty (all output must be stdout)", r.stderr))
		}
	} else if r.stderrCloses != 1 {
		p = append(p, fmt.Sprintf("%d stderr closes (want 1)", r.stderrCloses))
	}
	if wantStdout != nil && !bytes.Equal(r.stdout, wantStdout) {
		p = append(p, fmt.Sprintf("stdout %q (want %q)", r.stdout, wantStdout))
	}
	if wantStderr != nil && !bytes.Equal(r.stderr, wantStderr) {
		p = append(p, fmt.Sprintf("stderr %q (want %q)", r.stderr, wantStderr))
	}
	if r.exited == 1 && r.exitCode != wantCode {
		p = append(p, fmt.Sprintf("exit code %d (want %d)", r.exitCode, wantCode))
	}
	return p
}

func (r *execResult) summary() string {
	return fmt.Sprintf("stdout %q stderr %q closes %d/%d exited %dx code %d", r.stdout, r.stderr,
		r.stdoutCloses, r.stderrCloses, r.exited, r.exitCode)
}

func execStep(rep *reporter, name string, conn *grpc.ClientConn, taskID string, plan execPlan,
	wantStdout, wantStderr string, wantCode int64, timeout time.Duration) {
	r := runExec(conn, taskID, plan, timeout)
	var ws, we []byte
	ws = []byte(wantStdout)
	if !plan.tty {
		we = []byte(wantStderr)
	}
	if p := r.verify(ws, we, wantCode, plan.tty); len(p) > 0 {
		rep.fail(name, "%s; got %s", strings.Join(p, "; "), r.summary())
		return
	}
	rep.pass(name, "%s", r.summary())
}
