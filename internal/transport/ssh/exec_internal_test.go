package ssh

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cmd  Command
		sudo bool
		want string
	}{
		{"argv", Command{Argv: []string{"echo", "a b"}}, false, `env LC_ALL=C echo 'a b'`},
		{"script", Command{Script: "echo $HOME"}, false, `env LC_ALL=C /bin/sh -c 'echo $HOME'`},
		{"sudo", Command{Argv: []string{"id"}}, true, `env LC_ALL=C sudo -n -- env LC_ALL=C id`},
		{"dir", Command{Argv: []string{"ls"}, Dir: "/tmp/x y"}, false,
			`env LC_ALL=C /bin/sh -c 'cd -- "$1" || exit; shift; exec "$@"' sh '/tmp/x y' ls`},
		{"argv0 with =", Command{Argv: []string{"a=b"}}, false, `env LC_ALL=C /bin/sh -c 'exec "$@"' sh 'a=b'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, stdin, err := commandLine(tt.cmd, tt.sudo)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || stdin != nil {
				t.Errorf("got  %s (stdin %q)\nwant %s", got, stdin, tt.want)
			}
		})
	}
}

// Environment values go on standard input, never in the command line:
// the line names the prologue only, and the input is the header the
// prologue decodes followed by the command's own input.
func TestCommandLineEnvOnStdin(t *testing.T) {
	t.Parallel()
	cmd := Command{
		Argv:  []string{"true"},
		Env:   map[string]string{"B": "2 2", "A": "it's \\ é\nx", "E": ""},
		Stdin: []byte("program input"),
	}
	line, stdin, err := commandLine(cmd, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := "env LC_ALL=C sudo -n -- env LC_ALL=C /bin/sh -c " + Quote(envPrologue) + " sh true"; line != want {
		t.Errorf("line %s\nwant %s", line, want)
	}
	for _, v := range cmd.Env {
		if v != "" && strings.Contains(line, v) {
			t.Errorf("the line holds the value %q", v)
		}
	}
	want := "A=it's \\0134 \\0303\\0251\\0012x\nB=2 2\nE=\n\nprogram input"
	if string(stdin) != want {
		t.Errorf("stdin %q\nwant  %q", stdin, want)
	}
}

func TestPIDSniffer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		writes []string
		pid    int
		out    string
	}{
		{"alone", []string{"M 42\n"}, 42, ""},
		{"split", []string{"M", " 4", "2\nerr", "or\n"}, 42, "error\n"},
		{"after sshd notice", []string{"Could not chdir\nM 7\nx"}, 7, "Could not chdir\nx"},
		{"missing", []string{"no marker here\n"}, 0, "no marker here\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			s := newPIDSniffer("M", &out)
			for _, w := range tt.writes {
				s.Write([]byte(w))
			}
			s.flush()
			if s.get() != tt.pid || out.String() != tt.out {
				t.Errorf("pid %d out %q, want %d %q", s.get(), out.String(), tt.pid, tt.out)
			}
		})
	}
	var out bytes.Buffer
	s := newPIDSniffer("M", &out)
	s.Write(bytes.Repeat([]byte("x"), sniffLimit+1))
	s.Write([]byte("y"))
	if out.Len() != sniffLimit+2 {
		t.Errorf("past the limit %d bytes passed, want %d", out.Len(), sniffLimit+2)
	}
	// A server that sends the marker and then never a newline gets no
	// more held back either: what it sends goes on to the capture.
	out.Reset()
	s = newPIDSniffer("M", &out)
	s.Write([]byte("M "))
	for range 100 {
		s.Write(bytes.Repeat([]byte("9"), 4096))
	}
	if held := len(s.buf); held > 0 || out.Len() != 2+100*4096 || s.get() != 0 {
		t.Errorf("an endless marker line: %d bytes held back, %d passed, pid %d", held, out.Len(), s.get())
	}
}

func TestCode(t *testing.T) {
	t.Parallel()
	for _, c := range codes {
		wrapped := &ConnectError{Addr: "h:22", User: "u", Attempts: 3, Kind: c.err, Err: errors.New("cause")}
		if got := Code(wrapped); got != c.code {
			t.Errorf("Code(%v) = %q, want %q", wrapped, got, c.code)
		}
		if !strings.HasPrefix(c.code, "ssh.") {
			t.Errorf("code %q outside the ssh namespace", c.code)
		}
	}
	if Code(errors.New("other")) != "" {
		t.Error("foreign error has a code")
	}
	mm := &ConnectError{Kind: ErrHostKeyMismatch, Err: &HostKeyMismatchError{}}
	if Code(mm) != "ssh.host_key_mismatch" {
		t.Errorf("mismatch code %q", Code(mm))
	}
}
