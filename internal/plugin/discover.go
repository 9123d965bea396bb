package plugin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	"github.com/soulstack/soulstack/driversdk"
)

// BinaryPrefix starts the name of every CloudDriver plugin executable:
// driver "local" is served by soul-cloud-local.
const BinaryPrefix = "soul-cloud-"

// driverName is the grammar of a driver name: it becomes part of a file
// name, so nothing that could leave the plugin dir.
var driverName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// discover returns the path of the executable serving driver name: dir's
// soul-cloud-<name> if it is there, else the one on $PATH.
func discover(dir, name string) (string, error) {
	if !driverName.MatchString(name) {
		return "", &driversdk.Error{
			Code:    driversdk.CodeDriverNotFound,
			Message: fmt.Sprintf("%q is not a valid driver name (lowercase letters, digits, - and _)", name),
		}
	}
	file := BinaryPrefix + name
	if dir != "" {
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(file); err == nil {
		return p, nil
	}
	where := "$PATH"
	if dir != "" {
		where = dir + " or $PATH"
	}
	return "", &driversdk.Error{
		Code:    driversdk.CodeDriverNotFound,
		Message: fmt.Sprintf("driver %q: no executable %s in %s", name, file, where),
	}
}
