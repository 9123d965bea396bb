package plugin

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/soulstack/soulstack/driversdk"
	pb "github.com/soulstack/soulstack/internal/plugin/proto/clouddriverv1"
	"github.com/soulstack/soulstack/internal/plugin/wire"
)

// This file is where the host translates failures into *driversdk.Error:
// startError for starting a plugin (go-plugin's errors), callError for a
// call (gRPC statuses and a dead or hung process).

var errNotCloudDriver = errors.New("the plugin does not serve the CloudDriver service")

// pluginVersion finds the plugin's protocol version in go-plugin's
// "incompatible API version" error.
var pluginVersion = regexp.MustCompile(`Plugin version: (\d+)`)

// startError translates a failure to start the plugin of driver name at
// path. tail is the plugin's last stderr lines, already masked.
func startError(name, path string, err error, tail []string) error {
	msg := err.Error()
	var e *driversdk.Error
	switch {
	case strings.Contains(msg, "incompatible API version"):
		v, hint := "another", "install a build of the driver for this keeper"
		if m := pluginVersion.FindStringSubmatch(msg); m != nil {
			v = m[1]
			if n, err := strconv.Atoi(v); err == nil && n < wire.ProtocolVersion {
				hint = "the driver is older than this keeper: rebuild it against this keeper's driversdk"
			} else if err == nil {
				hint = "the driver is newer than this keeper: upgrade the keeper or install an older build of the driver"
			}
		}
		e = &driversdk.Error{
			Code: driversdk.CodeDriverIncompatible,
			Message: fmt.Sprintf("driver %q (%s) speaks CloudDriver protocol version %s; this keeper speaks version %d: %s",
				name, path, v, wire.ProtocolVersion, hint),
		}
	case strings.Contains(msg, "timeout while waiting for plugin to start"):
		e = &driversdk.Error{
			Code:    driversdk.CodeDriverTimeout,
			Message: fmt.Sprintf("driver %q (%s) did not complete its handshake in time; its process was killed", name, path),
		}
	default:
		// Exited before the handshake, a stray line on stdout, another
		// plugin protocol, an executable that cannot run: not a CloudDriver
		// plugin this keeper can use.
		e = &driversdk.Error{
			Code:    driversdk.CodeDriverIncompatible,
			Message: fmt.Sprintf("driver %q (%s) is not a CloudDriver plugin this keeper can use: %s", name, path, firstLine(msg)),
		}
	}
	if len(tail) > 0 {
		e.Message += "; its last output: " + strings.Join(tail, " | ")
	}
	return e
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// call describes a call whose error callError translates.
type call struct {
	driver   string
	method   string
	parent   context.Context // the caller's context
	deadline time.Time       // the deadline the driver was given
	budget   time.Duration   // from the start of the call to deadline
}

// callError translates the error of a call to p: the *driversdk.Error the
// driver returned (carried in the gRPC status details), the caller's own
// cancellation, or the host's verdict on the process: driver.timeout (and
// the process killed) when the driver did not answer by the deadline plus
// the kill grace, driver.crashed (and the process reaped) when it died or
// its connection broke, driver.incompatible for a method it does not serve.
// An *driversdk.Error the host made itself passes through unchanged.
func callError(p *proc, c call, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		var e *driversdk.Error
		if errors.As(err, &e) {
			return err
		}
		return &driversdk.Error{Code: driversdk.CodeDriverFailed, Message: fmt.Sprintf("driver %q: %s: %v", c.driver, c.method, err)}
	}
	for _, d := range st.Details() {
		if e, ok := d.(*pb.Error); ok {
			return &driversdk.Error{Code: e.GetCode(), Message: e.GetMessage(), Field: e.GetField()}
		}
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		if time.Now().Before(c.deadline) {
			// The plugin's own verdict, before the deadline: not hung.
			return &driversdk.Error{Code: driversdk.CodeDriverTimeout, Message: fmt.Sprintf("driver %q: %s: %s", c.driver, c.method, st.Message())}
		}
		p.stop(true)
		p.log.ErrorContext(c.parent, "driver did not answer after its deadline; killed its plugin process",
			"method", c.method, "pid", p.pid, "timeout", c.budget)
		return &driversdk.Error{
			Code:    driversdk.CodeDriverTimeout,
			Message: fmt.Sprintf("driver %q: %s did not answer within %s; its plugin process was killed", c.driver, c.method, c.budget.Round(time.Millisecond)),
		}
	case codes.Canceled:
		if err := c.parent.Err(); err != nil {
			return fmt.Errorf("driver %q: %s: %w", c.driver, c.method, err)
		}
	case codes.Unimplemented:
		return &driversdk.Error{
			Code:    driversdk.CodeDriverIncompatible,
			Message: fmt.Sprintf("driver %q does not implement %s: %s", c.driver, c.method, st.Message()),
		}
	}
	if st.Code() == codes.Unavailable || st.Code() == codes.Canceled || p.client.Exited() {
		exited := p.waitExited(time.Second)
		p.stop(false)
		what := "its connection broke"
		if exited {
			what = "its plugin process exited"
		}
		p.log.ErrorContext(c.parent, "driver crashed during a call", "method", c.method, "pid", p.pid, "error", st.Message())
		return &driversdk.Error{
			Code:    driversdk.CodeDriverCrashed,
			Message: fmt.Sprintf("driver %q: %s failed: %s; a new plugin process is started for the next call", c.driver, c.method, what),
		}
	}
	return &driversdk.Error{Code: driversdk.CodeDriverFailed, Message: fmt.Sprintf("driver %q: %s: %s", c.driver, c.method, st.Message())}
}
