package localcloud

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A VM is started in two re-executions of the driver's own binary:
//
//  1. The launcher, a child of the driver in a new session, waits on the
//     control pipe until the driver has moved it into the VM's cgroups,
//     then clones the init into new mount, UTS, IPC, PID, cgroup and
//     network namespaces (so the cgroup namespace is rooted at the VM's
//     cgroup), reports the init's PID and exits. The init is thus nobody's
//     child in the driver: the VM lives on when the driver exits.
//  2. The init, PID 1 of the VM, builds the VM's root and special
//     filesystems, waits until the driver has set up its network, pivots
//     into the root, drops the capabilities the VM must not have and
//     executes itself again (stage 2, still PID 1, with only
//     vmCapabilities), which applies the userdata, starts sshd, reports
//     "ready", and then reaps orphans and runs the rest of the userdata.
//     SIGTERM stops everything in the VM; SIGKILL from the host (what
//     Destroy sends) takes the whole PID namespace down at once.
//
// Both read their orders from environment variables. File descriptor 3 is
// the control pipe (the driver writes one byte per go-ahead) and 4 the
// status pipe (one line per event: "pid N", "ready", "error: …").
const (
	envRole = "SOULSTACK_LOCALCLOUD_ROLE"
	envBoot = "SOULSTACK_LOCALCLOUD_BOOT"

	roleLauncher = "launcher"
	roleInit     = "init"
	roleInit2    = "init2"
)

// bootConfig is what the init needs to know.
type bootConfig struct {
	// Dir is the VM's directory on the host (upper, work and merged).
	Dir   string `json:"dir"`
	Lower string `json:"lower"`
	// Layers, when set, make the root a view of the host (mountView)
	// with an overlay per layer instead of one overlay on Lower.
	Layers []string `json:"layers,omitempty"`
	FQDN   string   `json:"fqdn"`
	// SSHUser is made at first boot when the root lacks it.
	SSHUser string `json:"ssh_user"`
	// Mask are host paths hidden in the VM under an empty read-only tmpfs
	// (the driver's state dir, which holds the other VMs' layers).
	Mask []string `json:"mask"`
	// Nesting is the profile's nesting (see nesting_linux.go).
	Nesting string `json:"nesting,omitempty"`
}

// Paths inside a VM.
const (
	vmConfigDir    = "/etc/soulstack-local"
	vmUserdata     = "/var/lib/cloud/instance/user-data.txt"
	vmScripts      = "/var/lib/cloud/instance/scripts"
	vmBootFinished = "/var/lib/cloud/instance/boot-finished"
	vmOutputLog    = "/var/log/cloud-init-output.log"
	vmSSHDLog      = "/var/log/soulstack-local-sshd.log"
	vmPath         = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

func runChild() {
	switch os.Getenv(envRole) {
	case "":
		return
	case roleLauncher:
		os.Exit(runLauncher())
	case roleInit:
		os.Exit(runInit())
	case roleInit2:
		os.Exit(runInit2())
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: unknown role\n", envRole, os.Getenv(envRole))
		os.Exit(2)
	}
}

func runLauncher() int {
	ctl := os.NewFile(3, "control")
	status := os.NewFile(4, "status")
	var b [1]byte
	if _, err := io.ReadFull(ctl, b[:]); err != nil {
		fmt.Fprintf(status, "error: launcher: wait for the driver: %v\n", err)
		return 1
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"soulstack-local-init"}
	cmd.Env = []string{envRole + "=" + roleInit, envBoot + "=" + os.Getenv(envBoot)}
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{ctl, status}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid: true,
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWPID |
			unix.CLONE_NEWCGROUP | unix.CLONE_NEWNET,
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(status, "error: launcher: start the init: %v\n", err)
		return 1
	}
	fmt.Fprintf(status, "pid %d\n", cmd.Process.Pid)
	return 0
}

func runInit() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctl := os.NewFile(3, "control")
	status := os.NewFile(4, "status")
	fail := func(step string, err error) int {
		log.Error("init failed", "step", step, "err", err)
		fmt.Fprintf(status, "error: %s: %v\n", step, err)
		return 1
	}
	var bc bootConfig
	if err := json.Unmarshal([]byte(os.Getenv(envBoot)), &bc); err != nil {
		return fail("read the boot config", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	go func() {
		<-sigs
		os.Exit(0) // nothing runs in the VM yet
	}()

	if err := buildRoot(bc); err != nil {
		return fail("build the root", err)
	}
	var b [1]byte
	if _, err := io.ReadFull(ctl, b[:]); err != nil {
		return fail("wait for the network", err)
	}
	if err := enterRoot(bc); err != nil {
		return fail("enter the root", err)
	}
	if err := unix.Sethostname([]byte(bc.FQDN)); err != nil {
		return fail("set the hostname", err)
	}
	// Stage 2 is this binary again, executed from a thread whose bounding
	// set holds only vmCapabilities: PID 1 and everything after it have
	// no others. /proc/self/exe still names the binary after the pivot.
	if err := confineThread(nestingCapabilities(bc.Nesting)...); err != nil {
		return fail("confine the VM", err)
	}
	if err := confineSyscalls(bc.Nesting != ""); err != nil {
		if _, known := seccompArch(); known {
			return fail("confine the VM", err)
		}
		log.Warn("VM without a system call filter", "err", err)
	}
	env := []string{envRole + "=" + roleInit2, envBoot + "=" + os.Getenv(envBoot),
		"PATH=" + vmPath, "HOME=/root", "LANG=C.UTF-8"}
	err := unix.Exec("/proc/self/exe", []string{"soulstack-local-init"}, env)
	return fail("start stage 2", err)
}

// runInit2 is the VM's PID 1 from the pivot on (see runInit).
func runInit2() int {
	if err := hideInit(); err != nil {
		fmt.Fprintf(os.Stderr, "confine the VM: %v\n", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctl := os.NewFile(3, "control")
	status := os.NewFile(4, "status")
	fail := func(step string, err error) int {
		log.Error("init failed", "step", step, "err", err)
		fmt.Fprintf(status, "error: %s: %v\n", step, err)
		return 1
	}
	var bc bootConfig
	if err := json.Unmarshal([]byte(os.Getenv(envBoot)), &bc); err != nil {
		return fail("read the boot config", err)
	}
	os.Unsetenv(envRole)
	os.Unsetenv(envBoot)
	r := &reaper{waiting: map[int]chan unix.WaitStatus{}}
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT)
	go func() {
		for sig := range sigs {
			if sig == unix.SIGCHLD {
				r.reap()
				continue
			}
			close(stop)
			shutdown(r)
			os.Exit(0)
		}
	}()

	started := time.Now()
	if err := cloudInitReport(started, false, nil); err != nil {
		log.Error("cloud-init status", "err", err)
	}
	ud, errs := firstBoot(log, r, bc)
	go superviseSSHD(log, r, stop)
	if err := waitListening("127.0.0.1:22", 10*time.Second); err != nil {
		return fail("start sshd", fmt.Errorf("%w (see %s in the VM)", err, vmSSHDLog))
	}
	fmt.Fprintln(status, "ready")
	status.Close()
	ctl.Close()
	log.Info("ready", "fqdn", bc.FQDN)
	errs = append(errs, finalStage(log, r, ud)...)
	if err := cloudInitReport(started, true, errs); err != nil {
		log.Error("cloud-init status", "err", err)
	}
	select {} // the signal loop ends the process
}

// reaper is PID 1's wait loop: it reaps every child, including orphans
// that re-parent to PID 1, and hands the status of the ones it started to
// whoever waits for them.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
}

// start starts a process; its exit status arrives on the channel.
// Holding mu while starting means the child cannot be reaped before it is
// registered.
func (r *reaper) start(argv []string, stdout, stderr *os.File) (<-chan unix.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	if stdout == nil {
		stdout = null
	}
	if stderr == nil {
		stderr = null
	}
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Dir:   "/",
		Env:   os.Environ(),
		Files: []*os.File{null, stdout, stderr},
	})
	if err != nil {
		return nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[p.Pid] = ch
	_ = p.Release()
	return ch, nil
}

// run starts a process and waits for it.
func (r *reaper) run(argv []string, out *os.File) (unix.WaitStatus, error) {
	ch, err := r.start(argv, out, out)
	if err != nil {
		return 0, err
	}
	return <-ch, nil
}

func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiting[pid]; ok {
			ch <- ws
			delete(r.waiting, pid)
		}
	}
}

// shutdown stops every process in the VM: SIGTERM, up to 3 s for them to
// exit, then SIGKILL.
func shutdown(r *reaper) {
	_ = unix.Kill(-1, unix.SIGTERM)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		r.reap()
		if onlyInitLeft() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	r.reap()
}

// onlyInitLeft reports whether PID 1 is the last process in the VM.
func onlyInitLeft() bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n != 1 {
			return false
		}
	}
	return true
}

// superviseSSHD runs sshd in the foreground and starts it again if it
// dies, until stop is closed.
func superviseSSHD(log *slog.Logger, r *reaper, stop <-chan struct{}) {
	argv := []string{"/usr/sbin/sshd", "-D", "-f", vmConfigDir + "/sshd_config", "-E", vmSSHDLog}
	for {
		ch, err := r.start(argv, nil, nil)
		if err != nil {
			log.Error("start sshd", "err", err)
		} else {
			select {
			case ws := <-ch:
				log.Warn("sshd exited", "status", ws.ExitStatus(), "signal", ws.Signal())
			case <-stop:
				return
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
	}
}

func waitListening(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %s", addr, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// firstBoot makes the SSH user if the root lacks it and writes the
// userdata's files; like cloud-init, it logs what fails, goes on, and
// returns the failures for the cloud-init status.
func firstBoot(log *slog.Logger, r *reaper, bc bootConfig) (*userdata, []error) {
	var errs []error
	if bc.SSHUser != "root" {
		if err := ensureUser(r, bc.SSHUser); err != nil {
			log.Error("make the SSH user", "user", bc.SSHUser, "err", err)
			errs = append(errs, fmt.Errorf("make the SSH user %s: %w", bc.SSHUser, err))
		}
	}
	raw, err := os.ReadFile(vmUserdata)
	if errors.Is(err, os.ErrNotExist) {
		return &userdata{}, errs
	}
	ud, err := parseUserdata(string(raw))
	if err != nil {
		log.Error("userdata", "err", err)
		return &userdata{}, append(errs, fmt.Errorf("userdata: %w", err))
	}
	if err := ud.writeFiles("/", false); err != nil {
		log.Error("userdata", "err", err)
		errs = append(errs, err)
	}
	return ud, errs
}

// ensureUser makes a login user with a home, no password (key login
// only) and, when sudo is installed, password-less sudo, as cloud
// images do for their default user.
func ensureUser(r *reaper, user string) error {
	if _, err := (idLookup{root: "/"}).uid(user); err == nil {
		return nil
	}
	out, err := os.OpenFile(vmOutputLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	defer out.Close()
	// "*" rather than the "!" useradd sets: sshd without PAM refuses
	// accounts whose password starts with "!" as locked.
	ws, err := r.run([]string{"/usr/sbin/useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", user}, out)
	if err != nil {
		return err
	}
	if ws.ExitStatus() != 0 {
		return fmt.Errorf("useradd exited with %d (see %s)", ws.ExitStatus(), vmOutputLog)
	}
	if _, err := os.Stat("/usr/bin/sudo"); err == nil {
		if err := os.MkdirAll("/etc/sudoers.d", 0o755); err != nil {
			return err
		}
		return os.WriteFile("/etc/sudoers.d/90-soulstack-local", []byte(user+" ALL=(ALL) NOPASSWD:ALL\n"), 0o440)
	}
	return nil
}

// finalStage is cloud-init's final stage: deferred files, runcmd or the
// #! script, then the boot-finished marker. It returns what failed.
func finalStage(log *slog.Logger, r *reaper, ud *userdata) []error {
	var errs []error
	if err := ud.writeFiles("/", true); err != nil {
		log.Error("userdata", "err", err)
		errs = append(errs, err)
	}
	scripts := map[string]string{"runcmd": ud.runcmdScript(), "part-001": ud.Script}
	for _, name := range []string{"runcmd", "part-001"} {
		text := scripts[name]
		if text == "" {
			continue
		}
		if err := runScript(r, filepath.Join(vmScripts, name), text); err != nil {
			log.Error("userdata", "script", name, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	var uptime unix.Sysinfo_t
	_ = unix.Sysinfo(&uptime)
	line := fmt.Sprintf("%d - %s - soulstack-local\n", uptime.Uptime, time.Now().UTC().Format(time.RFC1123Z))
	if err := os.MkdirAll(filepath.Dir(vmBootFinished), 0o755); err == nil {
		_ = os.WriteFile(vmBootFinished, []byte(line), 0o644)
	}
	log.Info("boot finished")
	return errs
}

func runScript(r *reaper, path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(text), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(vmOutputLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	defer out.Close()
	argv := []string{path}
	if strings.HasPrefix(filepath.Base(path), "runcmd") {
		argv = []string{"/bin/sh", path}
	}
	ws, err := r.run(argv, out)
	if err != nil {
		return err
	}
	if ws.ExitStatus() != 0 {
		err := fmt.Errorf("%s exited with %d", path, ws.ExitStatus())
		// cloud-init's own line in the output log, after the script's.
		fmt.Fprintf(out, "soulstack-local: %v\n", err)
		return err
	}
	return nil
}

// statusLine reads one line the launcher or the init wrote.
func statusLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	line = strings.TrimSpace(line)
	if err != nil && line == "" {
		return "", err
	}
	if msg, ok := strings.CutPrefix(line, "error: "); ok {
		return "", errors.New(msg)
	}
	return line, nil
}

// parsePIDLine reads "pid N".
func parsePIDLine(line string) (int, error) {
	s, ok := strings.CutPrefix(line, "pid ")
	if !ok {
		return 0, fmt.Errorf("unexpected %q from the launcher", line)
	}
	return strconv.Atoi(s)
}
