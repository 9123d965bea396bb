package localcloud

import (
	"encoding/json"
	"os"
	"time"
)

// Where a VM's init reports its userdata's progress the way cloud-init
// does, so that whoever waits for cloud-init (the keeper, before a
// cloud-made soul's first step) can wait for this driver's VMs too.
const (
	vmCloudInitRun    = "/run/cloud-init"
	vmCloudInitStatus = vmCloudInitRun + "/status.json"
	vmCloudInitResult = vmCloudInitRun + "/result.json"
	// vmCloudInitShim answers "cloud-init status [--wait] [--long]" from
	// the two files above; /usr/local/bin comes first on the VM's PATH.
	vmCloudInitShim = "/usr/local/bin/cloud-init"
)

// cloudInitShim is the VM's cloud-init program: only the status command,
// answered from result.json (written once the userdata is done) as
// cloud-init answers it: "status: running", "done" or "error", exit 1 on
// error, --wait until it is no longer running, --long with the errors.
// result.json is written by cloudInitReport in json.MarshalIndent's
// shape, one error per line.
const cloudInitShim = `#!/bin/sh
# cloud-init of soulstack-local: this VM has no cloud-init; its init applies
# the userdata and writes /run/cloud-init/status.json and result.json as
# cloud-init does. Only "cloud-init status [--wait] [--long]" is available.
if [ "$1" != status ]; then
	echo "soulstack-local: only 'cloud-init status [--wait] [--long]' is available" >&2
	exit 3
fi
shift
wait=; long=
for a in "$@"; do
	case $a in
	-w|--wait) wait=1 ;;
	-l|--long) long=1 ;;
	*) echo "cloud-init status: unsupported option $a" >&2; exit 3 ;;
	esac
done
r=` + vmCloudInitResult + `
if [ -n "$wait" ]; then
	while [ ! -e $r ]; do printf .; sleep 0.2; done
	echo
fi
if [ ! -e $r ]; then s=running
elif grep -q '"errors": \[\]' $r; then s=done
else s=error
fi
echo "status: $s"
if [ -n "$long" ]; then
	echo "detail:"
	echo "soulstack-local userdata"
	if [ $s = error ]; then
		echo "errors:"
		sed -n '/"errors": \[/,/\]/p' $r | sed '1d;$d' | sed 's/^ */	- /'
	fi
fi
[ $s = error ] && exit 1
exit 0
`

// cloudInitStage is one stage of status.json.
type cloudInitStage struct {
	Errors   []string `json:"errors"`
	Start    float64  `json:"start"`
	Finished *float64 `json:"finished"`
}

// cloudInitReport writes status.json with the userdata's state: running
// from the start of the first boot, then finished with errs, and
// result.json with errs once finished (what cloud-init writes last).
func cloudInitReport(start time.Time, finished bool, errs []error) error {
	if err := os.MkdirAll(vmCloudInitRun, 0o755); err != nil {
		return err
	}
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		if e != nil {
			msgs = append(msgs, e.Error())
		}
	}
	stage := cloudInitStage{Errors: msgs, Start: unixSeconds(start)}
	var current any = "modules-final"
	if finished {
		f := unixSeconds(time.Now())
		stage.Finished, current = &f, nil
	}
	status := map[string]any{"v1": map[string]any{"datasource": "soulstack-local", "stage": current, "modules-final": stage}}
	if err := writePublicJSON(vmCloudInitStatus, status); err != nil || !finished {
		return err
	}
	return writePublicJSON(vmCloudInitResult, map[string]any{"v1": map[string]any{"datasource": "soulstack-local", "errors": msgs}})
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

// writePublicJSON writes v indented, readable by every user of the VM
// (cloud-init's files are), atomically: a reader never sees half.
func writePublicJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, append(b, '\n'), 0o644)
}
