package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/ioutil"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"nomadkit/nomad"
)

// state carries what Nomad keeps between plugin processes.
type state struct {
	configSpec  pm
	configBytes []byte
}

var semver = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// phaseLoad: start, PluginInfo, ConfigSchema, kill (Nomad's plugin loader at agent start).
func phaseLoad(rep *reporter, o *options, st *state) bool {
	rep.phase = "load"
	s := launch(rep, o)
	if s == nil {
		return false
	}
	defer s.kill()

	info, err := s.call("Base.PluginInfo", nil)
	if err != nil {
		rep.fail("PluginInfo", "%s", errText(err))
		return false
	}
	var bad []string
	if t := info.Enum("type"); t != "DRIVER" {
		bad = append(bad, "type "+t+" (want DRIVER)")
	}
	apis := info.Strs("plugin_api_versions")
	if !contains(apis, nomad.APIVersion) {
		bad = append(bad, fmt.Sprintf("plugin_api_versions %q lacks %s", apis, nomad.APIVersion))
	}
	if v := info.Str("plugin_version"); !semver.MatchString(v) {
		bad = append(bad, fmt.Sprintf("plugin_version %q is not a semver", v))
	}
	name := info.Str("name")
	if name == "" || (o.pluginName != "" && name != o.pluginName) {
		bad = append(bad, fmt.Sprintf("name %q (want %q)", name, o.pluginName))
	}
	if len(bad) > 0 {
		rep.fail("PluginInfo", "%s", strings.Join(bad, "; "))
		return false
	}
	rep.pass("PluginInfo", "%s", info.JSON())

	schema, err := s.call("Base.ConfigSchema", nil)
	if !rep.check("ConfigSchema", err, "%s", specSummary(schema.Msg("spec"))) {
		return false
	}
	st.configSpec = schema.Msg("spec")
	return true
}

// phaseValidate: a new process, SetConfig twice with the same bytes, kill.
func phaseValidate(rep *reporter, o *options, st *state) bool {
	rep.phase = "validate"
	if o.configJSON != "" {
		b, notes, err := encodeConfig(o.configJSON, st.configSpec)
		if err != nil {
			rep.fail("encode-config", "%v", err)
			return false
		}
		st.configBytes = b
		rep.pass("encode-config", "%d msgpack bytes %x; filled: %s", len(b), b, strings.Join(notes, ", "))
	} else {
		b, err := hex.DecodeString(o.configHex)
		if err != nil {
			rep.fail("encode-config", "-config-hex: %v", err)
			return false
		}
		st.configBytes = b
	}
	s := launch(rep, o)
	if s == nil {
		return false
	}
	defer s.kill()
	ok := true
	for i := 1; i <= 2; i++ {
		_, err := s.call("Base.SetConfig", setConfigRequest(st.configBytes))
		ok = rep.check(fmt.Sprintf("SetConfig#%d", i), err, "msgpack_config %x", st.configBytes) && ok
	}
	return ok
}

func setConfigRequest(cfg []byte) map[string]interface{} {
	return map[string]interface{}{
		"msgpack_config":     base64.StdEncoding.EncodeToString(cfg),
		"nomad_config":       map[string]interface{}{"driver": map[string]interface{}{"ClientMinPort": 14000, "ClientMaxPort": 14512}},
		"plugin_api_version": nomad.APIVersion,
	}
}

type waitResult struct {
	resp pm
	err  error
}

// phaseRun: a new process that stays for the agent's life; one task through its whole life.
func phaseRun(rep *reporter, o *options, st *state) {
	rep.phase = "run"
	s := launch(rep, o)
	if s == nil {
		return
	}
	defer s.kill()

	_, err := s.call("Base.SetConfig", setConfigRequest(st.configBytes))
	rep.check("SetConfig", err, "msgpack_config %x", st.configBytes)
	if _, err := s.call("Driver.Init", nil); isCode(err, "Unimplemented") {
		rep.pass("Init", "Unimplemented (Nomad counts it as success)")
	} else {
		rep.check("Init", err, "ok")
	}

	fp := openBg(s.conn, "Driver.Fingerprint", nil)
	events := openBg(s.conn, "Driver.TaskEvents", nil)
	select {
	case msg := <-fp.first:
		health := msg.Enum("health")
		detail := fmt.Sprintf("health %s %q, %d attributes", health, msg.Str("health_description"), msg.Len("attributes"))
		if o.requireHealthy && health != "HEALTHY" {
			rep.fail("Fingerprint", "%s (want HEALTHY)", detail)
		} else {
			rep.pass("Fingerprint", "first message: %s", detail)
		}
	case <-fp.done:
		_, err, _ := fp.stop()
		rep.fail("Fingerprint", "stream ended before its first message: %s", errText(err))
	case <-time.After(o.fingerprintTimeout):
		rep.fail("Fingerprint", "no message within %s", o.fingerprintTimeout)
	}

	capsResp, err := s.call("Driver.Capabilities", nil)
	caps := capsResp.Msg("capabilities")
	if err == nil && !caps.Valid() {
		rep.fail("Capabilities", "response without capabilities")
	} else {
		rep.check("Capabilities", err, "%s", caps.JSON())
	}

	schema, err := s.call("Driver.TaskConfigSchema", nil)
	if !rep.check("TaskConfigSchema", err, "%s", specSummary(schema.Msg("spec"))) {
		return
	}
	cfg, notes, err := encodeConfig(o.taskConfigJSON, schema.Msg("spec"))
	if err != nil {
		rep.fail("encode-task-config", "%v", err)
		return
	}
	rep.pass("encode-task-config", "%d msgpack bytes; filled: %s", len(cfg), strings.Join(notes, ", "))

	t, err := newTask(cfg)
	if err != nil {
		rep.fail("task-dirs", "%v", err)
		return
	}
	defer t.cleanup()

	started, err := s.call("Driver.StartTask", map[string]interface{}{"task": t.config})
	if err != nil {
		rep.fail("StartTask", "%s", errText(err))
		return
	}
	handle := started.Msg("handle")
	switch {
	case !handle.Valid():
		rep.fail("StartTask", "no handle in the response")
		return
	case handle.Msg("config").Str("id") != t.id:
		// Nomad stores the handle and later sends RecoverTask with task_id = handle.Config.ID.
		rep.fail("StartTask", "handle.config.id %q (want the task's id %q: Nomad recovers tasks by it)",
			handle.Msg("config").Str("id"), t.id)
	default:
		rep.pass("StartTask", "handle version %d state %s, driver_state %d bytes", handle.Int("version"),
			handle.Enum("state"), len(handle.Bytes("driver_state")))
	}

	waitCtx, cancelWait := context.WithCancel(context.Background())
	defer cancelWait()
	waited := make(chan waitResult, 1)
	go func() {
		r, err := call(waitCtx, s.conn, "Driver.WaitTask", map[string]interface{}{"task_id": t.id})
		waited <- waitResult{r, err}
	}()

	if caps.Bool("disable_log_collection") {
		rep.pass("task-logs", "disable_log_collection set: stdout_path/stderr_path not used")
	} else if waitFor(o.fingerprintTimeout, func() bool {
		return strings.Contains(t.stdout.String(), o.expectLogOut) && strings.Contains(t.stderr.String(), o.expectLogErr)
	}) {
		rep.pass("task-logs", "stdout_path %q, stderr_path %q", t.stdout.String(), t.stderr.String())
	} else {
		rep.fail("task-logs", "within %s stdout_path got %q (want %q), stderr_path got %q (want %q)", o.fingerprintTimeout,
			t.stdout.String(), o.expectLogOut, t.stderr.String(), o.expectLogErr)
	}

	inspect(rep, s, "InspectTask", t.id, "RUNNING")
	taskStats(rep, s, t.id)

	if caps.Bool("send_signals") {
		_, err := s.call("Driver.SignalTask", map[string]interface{}{"task_id": t.id, "signal": "SIGCONT"})
		rep.check("SignalTask", err, "SIGCONT delivered")
	}

	if !caps.Bool("exec") {
		rep.fail("exec", "capabilities.exec is false: the exec vectors can't run")
	} else if !o.exec {
		rep.fail("exec", "skipped (-exec=false)")
	} else {
		execTask(rep, s, t.id)
		execStep(rep, "ExecTaskStreaming/no-tty", s.conn, t.id, execPlan{
			command: []string{"sh", "-c", "echo hello stdout; echo hello stderr >&2; exit 43"},
		}, "hello stdout\n", "hello stderr\n", 43, o.execWait)
		execStep(rep, "ExecTaskStreaming/stdin+heartbeat", s.conn, t.id, execPlan{
			command: []string{"sh", "-c", "cat; echo eof-seen"},
			first:   []map[string]interface{}{heartbeat, stdinData("ping\n"), heartbeat, stdinClose},
		}, "ping\neof-seen\n", "", 0, o.execWait)
		// stty size must run after both resizes: the script says "ready" with echo off, then waits
		// for a line we only send after the resizes, which the plugin handles in order.
		execStep(rep, "ExecTaskStreaming/tty-resize", s.conn, t.id, execPlan{
			command: []string{"sh", "-c", "stty -echo; echo ready; read x; stty size"},
			tty:     true,
			first:   []map[string]interface{}{heartbeat},
			trigger: "ready\r\n",
			then:    []map[string]interface{}{ttySize(50, 40), ttySize(100, 100), stdinData("\n")},
		}, "ready\r\n100 100\r\n", "", 0, o.execWait)
	}

	select {
	case w := <-waited:
		rep.fail("WaitTask", "returned while the task should still run: %s %s", w.resp.JSON(), errOrNil(w.err))
		waited <- w // for WaitTask/result below
	default:
		rep.pass("WaitTask", "still blocked while the task runs")
	}

	_, err = s.call("Driver.StopTask", map[string]interface{}{"task_id": t.id, "timeout": "5s", "signal": o.killSignal})
	rep.check("StopTask", err, "timeout 5s signal %q", o.killSignal)

	select {
	case w := <-waited:
		switch {
		case w.err != nil:
			rep.fail("WaitTask/result", "%s", errText(w.err))
		case w.resp.Str("err") != "":
			rep.fail("WaitTask/result", "err %q", w.resp.Str("err"))
		case !w.resp.Has("result"):
			rep.fail("WaitTask/result", "no result")
		default:
			rep.pass("WaitTask/result", "%s", w.resp.JSON())
		}
	case <-time.After(o.callTimeout):
		rep.fail("WaitTask/result", "no answer within %s of StopTask", o.callTimeout)
	}

	inspect(rep, s, "InspectTask/exited", t.id, "EXITED")

	_, err = s.call("Driver.DestroyTask", map[string]interface{}{"task_id": t.id, "force": true})
	rep.check("DestroyTask", err, "force")

	var left []int
	if waitFor(10*time.Second, func() bool { left = procsOf(t.token, t.root); return len(left) == 0 }) {
		rep.pass("no-leftover-processes", "no process has the task's environment or directory")
	} else {
		rep.fail("no-leftover-processes", "pids %v still have the task's environment or directory", left)
	}

	for _, bg := range []struct {
		name string
		s    *bgStream
	}{{"Fingerprint/stream", fp}, {"TaskEvents/stream", events}} {
		n, err, early := bg.s.stop()
		if early {
			rep.fail(bg.name, "ended before the host cancelled it (%d messages): %s", n, errText(err))
		} else {
			rep.pass(bg.name, "held open until cancelled, %d messages", n)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := call(ctx, s.conn, "Driver.Shutdown", nil); isCode(err, "Unimplemented") {
		rep.pass("Driver.Shutdown", "Unimplemented (ignored by Nomad)")
	} else {
		rep.check("Driver.Shutdown", err, "ok within 2s")
	}
}

func inspect(rep *reporter, s *session, step, id, want string) {
	r, err := s.call("Driver.InspectTask", map[string]interface{}{"task_id": id})
	if err != nil {
		rep.fail(step, "%s", errText(err))
		return
	}
	task := r.Msg("task")
	if got := task.Enum("state"); task.Str("id") != id || got != want {
		rep.fail(step, "task id %q state %s (want %q %s)", task.Str("id"), got, id, want)
		return
	}
	rep.pass(step, "%s", task.JSON())
}

// taskStats takes one sample the way Nomad reads it: timestamp and the aggregate's cpu and
// memory must be there (the Go client skips or dereferences them).
func taskStats(rep *reporter, s *session, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.o.fingerprintTimeout)
	defer cancel()
	st, err := stream(ctx, s.conn, "Driver.TaskStats", map[string]interface{}{"task_id": id, "collection_interval": "1s"})
	var msg pm
	if err == nil {
		msg, err = st.Recv()
	}
	if err != nil {
		rep.fail("TaskStats", "%s", errText(err))
		return
	}
	stats := msg.Msg("stats")
	agg := stats.Msg("agg_resource_usage")
	var missing []string
	for _, f := range []struct {
		p    pm
		name string
	}{{stats, "timestamp"}, {stats, "agg_resource_usage"}, {agg, "cpu"}, {agg, "memory"}} {
		if !f.p.Has(f.name) {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		rep.fail("TaskStats", "sample lacks %s: %s", strings.Join(missing, ", "), msg.JSON())
		return
	}
	rep.pass("TaskStats", "one sample: %s", agg.JSON())
}

func execTask(rep *reporter, s *session, id string) {
	r, err := s.call("Driver.ExecTask", map[string]interface{}{
		"task_id": id, "command": []string{"sh", "-c", "echo exec-out; echo exec-err >&2; exit 3"}, "timeout": "10s",
	})
	if err != nil {
		rep.fail("ExecTask", "%s", errText(err))
		return
	}
	// Nomad's executor runs script checks with stdout and stderr on one buffer (returned as
	// stdout); a driver may also split them. Either way both lines must be there, once.
	out, errOut, code := string(r.Bytes("stdout")), string(r.Bytes("stderr")), r.Msg("result").Int("exit_code")
	all := out + errOut
	if !strings.HasPrefix(out, "exec-out\n") || !strings.Contains(all, "exec-err\n") || len(all) != len("exec-out\nexec-err\n") || code != 3 {
		rep.fail("ExecTask", "stdout %q stderr %q exit %d (want exec-out and exec-err lines, split or merged, and exit 3)", out, errOut, code)
		return
	}
	rep.pass("ExecTask", "stdout %q stderr %q exit %d", out, errOut, code)
}

// task is one task's worth of what Nomad's task runner prepares: alloc/task dirs, logmon FIFOs,
// environment, resources.
type task struct {
	id, token      string
	root           string
	stdout, stderr *fifoReader
	config         map[string]interface{}
}

func newTask(driverConfig []byte) (*task, error) {
	root, err := ioutil.TempDir("", "nomadkit-interop-")
	if err != nil {
		return nil, err
	}
	t := &task{root: root, token: "NOMADKIT_INTEROP_TOKEN=" + randomHex(16)}
	allocID, name := uuid(), "interop"
	t.id = fmt.Sprintf("%s/%s/%s", allocID, name, randomHex(4))
	allocDir := filepath.Join(root, allocID)
	shared := filepath.Join(allocDir, "alloc")
	taskDir := filepath.Join(allocDir, name)
	for _, d := range []string{"logs", "data", "tmp"} {
		if err := os.MkdirAll(filepath.Join(shared, d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"local", "secrets", "tmp"} {
		if err := os.MkdirAll(filepath.Join(taskDir, d), 0o755); err != nil {
			return nil, err
		}
	}
	stdoutPath := filepath.Join(shared, "logs", "."+name+".stdout.fifo")
	stderrPath := filepath.Join(shared, "logs", "."+name+".stderr.fifo")
	if t.stdout, err = openFifo(stdoutPath); err != nil {
		return nil, err
	}
	if t.stderr, err = openFifo(stderrPath); err != nil {
		return nil, err
	}
	// raw_exec-style tasks (no filesystem isolation) get the agent's environment too.
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if i := strings.IndexByte(kv, '='); i > 0 {
			env[kv[:i]] = kv[i+1:]
		}
	}
	for k, v := range map[string]string{
		"NOMAD_ALLOC_ID": allocID, "NOMAD_TASK_NAME": name, "NOMAD_GROUP_NAME": name, "NOMAD_JOB_NAME": name,
		"NOMAD_NAMESPACE": "default", "NOMAD_ALLOC_DIR": shared, "NOMAD_TASK_DIR": filepath.Join(taskDir, "local"),
		"NOMAD_SECRETS_DIR": filepath.Join(taskDir, "secrets"), "NOMAD_CPU_LIMIT": "100", "NOMAD_MEMORY_LIMIT": "256",
	} {
		env[k] = v
	}
	kv := strings.SplitN(t.token, "=", 2)
	env[kv[0]] = kv[1]
	host, _ := os.Hostname()
	t.config = map[string]interface{}{
		"id": t.id, "name": name, "msgpack_driver_config": base64.StdEncoding.EncodeToString(driverConfig),
		"env": env,
		"resources": map[string]interface{}{
			"allocated_resources": map[string]interface{}{
				"cpu": map[string]interface{}{"cpu_shares": 100}, "memory": map[string]interface{}{"memory_mb": 256},
			},
			"linux_resources": map[string]interface{}{"cpu_shares": 100, "memory_limit_bytes": 256 << 20, "PercentTicks": 0.05},
		},
		// The allocation's root: drivers derive the task dir as alloc_dir/name (TaskConfig.TaskDir).
		"alloc_dir": allocDir, "stdout_path": stdoutPath, "stderr_path": stderrPath,
		"task_group_name": name, "job_name": name, "job_id": name, "alloc_id": allocID, "namespace": "default",
		"node_name": host, "node_id": uuid(),
	}
	return t, nil
}

// cleanup also SIGKILLs what a failed run left behind (found by our unique token and temp dir).
func (t *task) cleanup() {
	for _, pid := range procsOf(t.token, t.root) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	t.stdout.Close()
	t.stderr.Close()
	os.RemoveAll(t.root)
}

func specSummary(spec pm) string {
	if !spec.Valid() {
		return "no spec"
	}
	if obj := spec.Msg("object"); obj.Valid() {
		return fmt.Sprintf("object with %d attributes", obj.Len("attributes"))
	}
	return spec.JSON()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func uuid() string {
	h := randomHex(16)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func errOrNil(err error) string {
	if err == nil {
		return ""
	}
	return errText(err)
}
