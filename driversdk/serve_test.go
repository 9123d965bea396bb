package driversdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/soulstack/soulstack/internal/plugin/proto/clouddriverv1"
)

func TestToStatus(t *testing.T) {
	t.Parallel()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		code codes.Code
		want *pb.Error
	}{
		{"driver error", context.Background(), InvalidProfile("cpus", "too many"), codes.InvalidArgument,
			&pb.Error{Code: CodeProfileInvalid, Message: "too many", Field: "cpus"}},
		{"wrapped driver error", context.Background(), errors.Join(errors.New("x"), Errorf(CodeVMNotFound, "no vm-1")), codes.NotFound,
			&pb.Error{Code: CodeVMNotFound, Message: "no vm-1"}},
		{"plain error", context.Background(), errors.New("boom"), codes.Unknown,
			&pb.Error{Code: CodeDriverFailed, Message: "boom"}},
		{"deadline", expired, context.DeadlineExceeded, codes.DeadlineExceeded,
			&pb.Error{Code: CodeDriverTimeout, Message: "the driver gave up at its deadline: context deadline exceeded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, ok := status.FromError(toStatus(tc.ctx, tc.err))
			if !ok || st.Code() != tc.code {
				t.Fatalf("status = %v, want code %s", st, tc.code)
			}
			details := st.Details()
			if len(details) != 1 {
				t.Fatalf("details = %v", details)
			}
			got, ok := details[0].(*pb.Error)
			if !ok || got.GetCode() != tc.want.GetCode() || got.GetMessage() != tc.want.GetMessage() || got.GetField() != tc.want.GetField() {
				t.Fatalf("detail = %v, want %v", details[0], tc.want)
			}
		})
	}
}

func TestLogHandlerWritesHCLogJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(&buf, slog.LevelDebug))
	log.Warn("disk almost full", "vm", "vm-1", slog.Group("quota", "used", 9))
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if m["@level"] != "warn" || m["@message"] != "disk almost full" || m["vm"] != "vm-1" || m["@timestamp"] == nil {
		t.Fatalf("line = %s", buf.Bytes())
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", m["@timestamp"].(string)); err != nil {
		t.Fatalf("@timestamp: %v", err)
	}
	if q, _ := m["quota"].(map[string]any); q["used"] != float64(9) {
		t.Fatalf("group = %v", m["quota"])
	}
}
