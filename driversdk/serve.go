package driversdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/soulstack/soulstack/internal/logctx"
	pb "github.com/soulstack/soulstack/internal/plugin/proto/clouddriverv1"
	"github.com/soulstack/soulstack/internal/plugin/wire"
)

// Serve serves d to the keeper that started this process and returns when
// the keeper is done with it. A driver's main is usually one line:
//
//	func main() { driversdk.Serve(mydriver.New()) }
//
// Started by hand, without a keeper, Serve prints a hint and exits with
// status 1.
//
// The process's stdout belongs to the protocol: never write to it, not even
// before Serve is called (a stray line there fails the handshake). After
// Serve starts, os.Stdout and os.Stderr are pipes the keeper reads and logs
// as warnings; child processes must not inherit the original stdout either
// (exec.Cmd's default, a nil Stdout, is fine).
//
// Log with log/slog (or the log package): Serve makes slog's default
// logger write JSON lines to the original stderr, which the keeper forwards
// to its own log at the same level, masked. Log a call's work with the
// call's context (slog.InfoContext(ctx, ...)): the line then carries the
// run the keeper made the call for. NewLogHandler's own handler does not
// add it; wrap it the way Serve does to get the same. Never log the provider's
// credentials; the keeper masks their text anyway.
//
// Every call's context carries the deadline the keeper set for the call. A
// driver that returns when its context is done reports a clean
// driver.timeout; a driver still busy a grace period after the deadline is
// taken for hung and its process is killed. A panic in a driver method is recovered, logged with its stack and
// reported as driver.failed. Serve also exits when the keeper that started
// it is gone, so a driver never outlives its keeper.
func Serve(d Driver) {
	stderr := os.Stderr
	slog.SetDefault(slog.New(logctx.Handler(NewLogHandler(stderr, slog.LevelDebug))))
	go exitWithParent(os.Getppid())
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.Plugins(&server{d: d}),
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:       "go-plugin",
			Level:      hclog.Info,
			Output:     stderr,
			JSONFormat: true,
		}),
	})
}

// exitWithParent ends the process when its parent, the keeper, is gone
// (the process is then re-parented and its parent PID changes).
func exitWithParent(ppid int) {
	if ppid <= 1 {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != ppid {
			slog.Error("the keeper that started this driver is gone; exiting")
			os.Exit(1)
		}
	}
}

// NewLogHandler returns a slog handler that writes each record to w as one
// JSON line in the shape the keeper reads from a plugin's stderr (the
// hclog JSON format: @timestamp, @level, @message and the attributes).
// Serve installs one on stderr as slog's default; a driver only needs it to
// build a logger of its own.
func NewLogHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				return slog.String("@level", levelName(a.Value.Any()))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	})
}

// levelName names a slog level the way hclog does.
func levelName(v any) string {
	l, _ := v.(slog.Level)
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	default:
		return "error"
	}
}

// server is the driver side of the gRPC adapter: it turns protocol
// messages into driversdk types, calls the Driver, and turns its answers
// and errors back.
type server struct {
	pb.UnimplementedCloudDriverServer
	d Driver
}

var _ pb.CloudDriverServer = (*server)(nil)

// guard runs a driver call under the deadline the keeper set for it (see
// wire.DeadlineKey), turns a panic into an error, and maps the error to a
// gRPC status.
func guard(ctx context.Context, method string, call func(ctx context.Context) error) (err error) {
	if vals := metadata.ValueFromIncomingContext(ctx, wire.RunKey); len(vals) == 1 {
		ctx = logctx.WithRun(ctx, vals[0])
	}
	if dl, ok := driverDeadline(ctx); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			slog.ErrorContext(ctx, "driver panicked", "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = toStatus(ctx, &Error{Code: CodeDriverFailed, Message: fmt.Sprintf("driver panicked in %s: %v", method, r)})
		}
	}()
	if err := call(ctx); err != nil {
		return toStatus(ctx, err)
	}
	return nil
}

// driverDeadline returns the deadline the keeper sent in the call's
// metadata.
func driverDeadline(ctx context.Context) (time.Time, bool) {
	vals := metadata.ValueFromIncomingContext(ctx, wire.DeadlineKey)
	if len(vals) != 1 {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(vals[0], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// toStatus is the one translation of a driver's error to the wire: an
// *Error keeps its code, message and field (in the status details); a
// context error after the deadline becomes driver.timeout; anything else
// becomes driver.failed with the error's text.
func toStatus(ctx context.Context, err error) error {
	var e *Error
	switch {
	case errors.As(err, &e):
	case ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		e = &Error{Code: CodeDriverTimeout, Message: "the driver gave up at its deadline: " + err.Error()}
	default:
		e = &Error{Code: CodeDriverFailed, Message: err.Error()}
	}
	st := status.New(grpcCode(e.Code), e.Message)
	if withDetail, derr := st.WithDetails(&pb.Error{Code: e.Code, Message: e.Message, Field: e.Field}); derr == nil {
		st = withDetail
	}
	return st.Err()
}

// grpcCode picks the gRPC code that goes with a driver error code. The
// keeper reads the code from the status details; this is for gRPC tooling.
func grpcCode(code string) codes.Code {
	switch {
	case code == CodeProfileInvalid:
		return codes.InvalidArgument
	case strings.HasSuffix(code, ".not_found"):
		return codes.NotFound
	case strings.HasSuffix(code, ".unsupported"):
		return codes.FailedPrecondition
	case code == CodeDriverTimeout:
		return codes.DeadlineExceeded
	default:
		return codes.Unknown
	}
}

func (s *server) Capabilities(ctx context.Context, _ *pb.CapabilitiesRequest) (*pb.CapabilitiesResponse, error) {
	var out *pb.CapabilitiesResponse
	err := guard(ctx, "Capabilities", func(ctx context.Context) error {
		c, err := s.d.Capabilities(ctx)
		if err != nil {
			return err
		}
		out = &pb.CapabilitiesResponse{Resizable: c.Resizable, IdempotencyTokens: c.IdempotencyTokens, Listable: c.Listable}
		return nil
	})
	return out, err
}

func (s *server) ValidateProfile(ctx context.Context, req *pb.ValidateProfileRequest) (*pb.ValidateProfileResponse, error) {
	err := guard(ctx, "ValidateProfile", func(ctx context.Context) error {
		return s.d.ValidateProfile(ctx, providerFromWire(req.GetProvider()), rawJSON(req.GetProfileJson()))
	})
	if err != nil {
		return nil, err
	}
	return &pb.ValidateProfileResponse{}, nil
}

func (s *server) Create(ctx context.Context, req *pb.CreateRequest) (*pb.CreateResponse, error) {
	var out *pb.CreateResponse
	err := guard(ctx, "Create", func(ctx context.Context) error {
		vms, err := s.d.Create(ctx, CreateRequest{
			Provider:       providerFromWire(req.GetProvider()),
			RequestID:      req.GetRequestId(),
			RunID:          req.GetRunId(),
			Profile:        rawJSON(req.GetProfileJson()),
			Count:          int(req.GetCount()),
			Names:          req.GetNames(),
			Userdata:       req.GetUserdata(),
			AuthorizedKeys: req.GetAuthorizedKeys(),
		})
		if err != nil {
			return err
		}
		out = &pb.CreateResponse{}
		out.Vms, err = vmsToWire(vms)
		return err
	})
	return out, err
}

func (s *server) Destroy(ctx context.Context, req *pb.DestroyRequest) (*pb.DestroyResponse, error) {
	err := guard(ctx, "Destroy", func(ctx context.Context) error {
		return s.d.Destroy(ctx, DestroyRequest{Provider: providerFromWire(req.GetProvider()), VMIDs: req.GetVmIds()})
	})
	if err != nil {
		return nil, err
	}
	return &pb.DestroyResponse{}, nil
}

func (s *server) Resize(ctx context.Context, req *pb.ResizeRequest) (*pb.ResizeResponse, error) {
	var out *pb.ResizeResponse
	err := guard(ctx, "Resize", func(ctx context.Context) error {
		c, err := s.d.Capabilities(ctx)
		if err != nil {
			return err
		}
		if !c.Resizable {
			return &Error{Code: CodeResizeUnsupported, Message: "this driver cannot resize VMs"}
		}
		res, err := s.d.Resize(ctx, ResizeRequest{
			Provider: providerFromWire(req.GetProvider()),
			VMIDs:    req.GetVmIds(),
			Spec:     rawJSON(req.GetSpecJson()),
		})
		if err != nil {
			return err
		}
		out = &pb.ResizeResponse{Results: make([]*pb.ResizeResult, len(res))}
		for i, r := range res {
			out.Results[i] = &pb.ResizeResult{VmId: r.VMID, CausedDowntime: r.CausedDowntime, Unchanged: r.Unchanged}
		}
		return nil
	})
	return out, err
}

func (s *server) List(ctx context.Context, req *pb.ListRequest) (*pb.ListResponse, error) {
	var out *pb.ListResponse
	err := guard(ctx, "List", func(ctx context.Context) error {
		c, err := s.d.Capabilities(ctx)
		if err != nil {
			return err
		}
		if !c.Listable {
			return &Error{Code: CodeListUnsupported, Message: "this driver cannot list VMs"}
		}
		vms, err := s.d.List(ctx, ListRequest{Provider: providerFromWire(req.GetProvider()), Tags: req.GetTags()})
		if err != nil {
			return err
		}
		out = &pb.ListResponse{}
		out.Vms, err = vmsToWire(vms)
		return err
	})
	return out, err
}

func providerFromWire(p *pb.Provider) Provider {
	return Provider{
		Name:        p.GetName(),
		Region:      p.GetRegion(),
		FQDNSuffix:  p.GetFqdnSuffix(),
		Config:      rawJSON(p.GetConfigJson()),
		Credentials: p.GetCredentials(),
		KeeperID:    p.GetKeeperId(),
	}
}

// rawJSON returns b as a json.RawMessage, nil when empty.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

func vmsToWire(vms []VM) ([]*pb.VM, error) {
	out := make([]*pb.VM, len(vms))
	for i, vm := range vms {
		var attrs []byte
		if len(vm.Attributes) > 0 {
			b, err := json.Marshal(vm.Attributes)
			if err != nil {
				return nil, &Error{Code: CodeDriverFailed, Message: fmt.Sprintf("VM %s: attributes are not JSON: %v", vm.ID, err)}
			}
			attrs = b
		}
		out[i] = &pb.VM{
			Id: vm.ID, Fqdn: vm.FQDN, PrimaryIp: vm.PrimaryIP,
			PublicIp: vm.PublicIP, PrivateIp: vm.PrivateIP, Addresses: addressesToWire(vm.Addresses),
			AttributesJson: attrs, Tags: vm.Tags,
		}
	}
	return out, nil
}

func addressesToWire(as []Address) []*pb.Address {
	if len(as) == 0 {
		return nil
	}
	out := make([]*pb.Address, len(as))
	for i, a := range as {
		out[i] = &pb.Address{Ip: a.IP, Kind: a.Kind, Network: a.Network}
	}
	return out
}
