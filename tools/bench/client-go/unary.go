package main

// InspectTask calls kept in flight, counted over a window the bench can see.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

const inspectMethod = "/hashicorp.nomad.plugins.drivers.proto.Driver/InspectTask"

type unaryResult struct {
	CallsPerSec      float64 `json:"callsPerSec"`
	Calls            int64   `json:"calls"`
	Seconds          float64 `json:"seconds"`
	ClientCPUSeconds float64 `json:"clientCpuSeconds"`
}

// unary keeps `concurrency` InspectTask calls in flight on one connection: `warmup` first, then
// `seconds` counted. A "counting" line on stdout marks the start of the counted window, so the
// bench can read the server's CPU time around it; the result line marks its end.
func unary(conn *grpc.ClientConn, taskID string, concurrency int, warmup, seconds, deadline time.Duration, out *json.Encoder) error {
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, taskID)
	// By default no deadline, as Nomad calls InspectTask (a deadline adds grpc-timeout and a server
	// timer to every call); the bench kills this process if it hangs.
	call := func() ([]byte, error) {
		var reply []byte
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if deadline > 0 {
			ctx, cancel = context.WithTimeout(ctx, deadline)
		}
		defer cancel()
		err := conn.Invoke(ctx, inspectMethod, &req, &reply, grpc.ForceCodec(rawCodec{}))
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
