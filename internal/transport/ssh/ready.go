package ssh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/soulstack/soulstack/internal/transport"
)

// DefaultReadyTimeout bounds the wait for a cloud-made soul's cloud-init
// when the step has no deadline of its own (no timeout, no run timeout)
// and the peer sets no ReadyTimeout.
const DefaultReadyTimeout = 15 * time.Minute

// ReadyConnectRetry is how a soul that awaits readiness is connected to
// when the step sets no connect policy: about five minutes of tries (as
// Terraform's connection timeout), far longer than the transport's
// default, since a VM just made may still be booting (a machine under
// software emulation takes more than a minute to start sshd) or, its
// sshd up, refuse the key its cloud-init has not yet written.
var ReadyConnectRetry = transport.RetryPolicy{Attempts: 60, Interval: 5 * time.Second}

// Codes of a soul that is not ready (ReadyError).
const (
	// CodeCloudInitFailed: the soul's cloud-init finished with an error;
	// the message carries its status and the last lines of its output log.
	CodeCloudInitFailed = "soul.cloud_init_failed"
	// CodeNotReady: the soul's cloud-init had not finished within
	// DefaultReadyTimeout, or its answer could not be read.
	CodeNotReady = "soul.not_ready"
)

// readyLogLines is how many lines of /var/log/cloud-init-output.log a
// cloud-init failure carries.
const readyLogLines = 20

// readyProbe is the shell text run over the first connection to a soul
// that awaits readiness. It prints one header line, then details:
//
//	cloud-init EXIT      cloud-init status --wait exited with EXIT; when not
//	                     0 or 2, the output of status --long and the log's
//	                     last lines follow
//	result               no cloud-init program, but /run/cloud-init/result.json
//	                     (printed next) says how it ended
//	absent               no cloud-init at all: nothing to wait for
//
// The wait runs as the connecting user, without sudo: until cloud-init has
// finished, the user's sudo rule may not exist yet. The log is root's to
// read on most images, hence sudo -n after a plain try.
//
// cloud-init before 23.1 (Debian bookworm's 22.4) reports done between
// two of its stages, once modules:config has finished and before
// modules:final has started: status --wait returns while the userdata's
// runcmd has not run yet. Under systemd the probe therefore also waits
// until no cloud-init unit has a job queued (the boot's start jobs are
// queued at once, so cloud-final's is there until it runs), then asks
// again.
var readyProbe = `if command -v cloud-init >/dev/null 2>&1; then
cloud-init status --wait >/dev/null 2>&1
rc=$?
if [ -d /run/systemd/system ]; then
while systemctl list-jobs --no-legend --no-pager 2>/dev/null | grep -Eq '[[:space:]]cloud-(init-local|init|config|final)\.service[[:space:]]'; do sleep 1; done
cloud-init status --wait >/dev/null 2>&1
rc=$?
fi
echo "cloud-init $rc"
if [ "$rc" != 0 ] && [ "$rc" != 2 ]; then
cloud-init status --long 2>&1 | head -n 40
echo "--- /var/log/cloud-init-output.log"
tail -n ` + strconv.Itoa(readyLogLines) + ` /var/log/cloud-init-output.log 2>/dev/null || sudo -n tail -n ` + strconv.Itoa(readyLogLines) + ` /var/log/cloud-init-output.log 2>/dev/null
fi
elif [ -r /run/cloud-init/result.json ]; then
echo result
head -c 65536 /run/cloud-init/result.json
else
echo absent
fi
`

// ReadyError is a soul whose cloud-init failed (CodeCloudInitFailed) or
// cannot be told to have finished (CodeNotReady).
type ReadyError struct {
	Code    string
	Message string
}

func (e *ReadyError) Error() string { return e.Message }

// TransportCode returns the error's code.
func (e *ReadyError) TransportCode() string { return e.Code }

// execer runs one command on a soul; *Client implements it.
type execer interface {
	Exec(ctx context.Context, cmd Command) (Result, error)
}

// awaitReady waits, over c, until the cloud-init of soul sid has finished,
// bounded by ctx's deadline or, when it has none, by DefaultReadyTimeout.
// A cloud-init that failed is a *ReadyError with CodeCloudInitFailed; one
// still running at the default bound, CodeNotReady; a step deadline or a
// cancellation, ctx's error.
func awaitReady(ctx context.Context, c execer, sid string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	wctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, err := c.Exec(wctx, Command{Script: readyProbe})
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("the cloud-init of %s had not finished by the step's deadline: %w", sid, context.Cause(ctx))
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("wait for the cloud-init of %s: %w", sid, context.Cause(ctx))
	case err != nil && wctx.Err() != nil:
		return &ReadyError{Code: CodeNotReady, Message: fmt.Sprintf("the cloud-init of %s had not finished after %s", sid, timeout)}
	case err != nil:
		return fmt.Errorf("wait for the cloud-init of %s: %w", sid, err)
	}
	return readyVerdict(sid, res)
}

// readyVerdict reads the probe's answer.
func readyVerdict(sid string, res Result) error {
	out := strings.TrimRight(string(res.Stdout), "\n")
	head, rest, _ := strings.Cut(out, "\n")
	switch {
	case head == "absent":
		return nil
	case head == "result":
		return resultVerdict(sid, rest)
	case strings.HasPrefix(head, "cloud-init "):
		rc, err := strconv.Atoi(strings.TrimPrefix(head, "cloud-init "))
		if err != nil {
			break
		}
		// 0: done (or disabled); 2: done with recoverable errors
		// (cloud-init 23.4 and later), which it finished all the same.
		if rc == 0 || rc == 2 {
			return nil
		}
		return &ReadyError{Code: CodeCloudInitFailed, Message: fmt.Sprintf("the cloud-init of %s failed (cloud-init status exited with %d):\n%s", sid, rc, strings.TrimSpace(rest))}
	}
	return &ReadyError{Code: CodeNotReady, Message: fmt.Sprintf("cannot tell whether the cloud-init of %s finished: the probe exited with %d and printed %q", sid, res.ExitCode, firstLine(out))}
}

// resultVerdict reads /run/cloud-init/result.json: {"v1": {"errors": [...]}}.
func resultVerdict(sid, text string) error {
	var r struct {
		V1 struct {
			Errors []any `json:"errors"`
		} `json:"v1"`
	}
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return &ReadyError{Code: CodeNotReady, Message: fmt.Sprintf("the cloud-init result of %s (/run/cloud-init/result.json) cannot be read: %v", sid, err)}
	}
	if len(r.V1.Errors) == 0 {
		return nil
	}
	lines := make([]string, len(r.V1.Errors))
	for i, e := range r.V1.Errors {
		lines[i] = fmt.Sprint(e)
	}
	return &ReadyError{Code: CodeCloudInitFailed, Message: fmt.Sprintf("the cloud-init of %s failed (/run/cloud-init/result.json):\n%s", sid, strings.Join(lines, "\n"))}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 200 {
		l = l[:200]
	}
	return l
}
