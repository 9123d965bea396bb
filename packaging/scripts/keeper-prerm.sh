#!/bin/sh
# soulstack-keeper prerm: stop the keeper (it drains) before its files go.
# The data in /var/lib/soulstack-keeper stays, on remove and on purge.
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	systemctl disable --now soulstack-keeper.service soulstack-keeper-vms.service soulstack-keeper-backup.timer >/dev/null 2>&1 || true
fi
