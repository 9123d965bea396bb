#!/bin/sh
# keeper-backup: what soulstack-keeper-backup.service runs. A `keeper
# backup` of the packaged keeper into $BACKUP_DIR (default
# /var/backups/soulstack), as the user that owns the data dir (soulstack
# under soulstack-keeper.service, root under soulstack-keeper-vms.service),
# so that no file of the keeper's changes owner; keeps the $KEEP (default
# 14) newest backups. The data key is not in them: keep
# /var/lib/soulstack-keeper/data.key elsewhere.
set -eu
data=/var/lib/soulstack-keeper
dir=${BACKUP_DIR:-/var/backups/soulstack}
keep=${KEEP:-14}
owner=$(stat -c %U "$data")
install -d -m 0700 -o "$owner" -g "$(stat -c %G "$data")" "$dir"
file="$dir/keeper-$(date -u +%Y%m%dT%H%M%SZ).backup"
# setpriv, not runuser: no PAM session (the unit's sandbox refuses what
# pam_limits would ask), just the owner's uid, gid and groups.
setpriv --reuid="$owner" --regid="$(stat -c %G "$data")" --init-groups -- /usr/bin/keeper backup "$file" --config /etc/soulstack/keeper.yml
echo "keeper-backup: wrote $file"
ls -1t "$dir"/keeper-*.backup | tail -n +"$((keep + 1))" | while read -r old; do
	rm -f -- "$old"
	echo "keeper-backup: removed $old (keeping the $keep newest)"
done
