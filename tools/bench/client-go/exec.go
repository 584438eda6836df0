package main

// ExecTaskStreaming as Nomad drives it, with the protocol checked on the way.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const execMethod = "/hashicorp.nomad.plugins.drivers.proto.Driver/ExecTaskStreaming"

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
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			data += len(v)
		case num == 2 && typ == protowire.VarintType:
			closed = u != 0
		}
		return nil
	})
	return data, closed, err
}

// exitCode reads ExitResult {exit_code = 1}.
func exitCode(b []byte) (code int64, err error) {
	err = eachField(b, func(num protowire.Number, typ protowire.Type, _ []byte, u uint64) error {
		if num == 1 && typ == protowire.VarintType {
			code = int64(int32(u))
		}
		return nil
	})
	return code, err
}

// take checks one ExecTaskStreamingResponse {stdout = 1, stderr = 2, exited = 3, result = 4}.
func (s *session) take(b []byte) error {
	s.messages++
	if s.exited > 0 {
		return errors.New("a message after exited")
	}
	exited := false
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) error {
		switch {
		case (num == 1 || num == 2) && typ == protowire.BytesType:
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
		case num == 3 && typ == protowire.VarintType:
			exited = u != 0
		case num == 4 && typ == protowire.BytesType:
			code, err := exitCode(v)
			if err != nil {
				return err
			}
			s.exitCode = code
		}
		return nil
	})
	if err != nil {
		return err
	}
	if exited {
		if !s.stdoutClosed || !s.stderrClosed {
			return errors.New("exited before both close markers")
		}
		s.exited++
	}
	return nil
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
