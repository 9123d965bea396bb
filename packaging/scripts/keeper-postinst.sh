#!/bin/sh
# soulstack-keeper postinst: the keeper's system user; the unit and the
# daily backup's timer are enabled and started on a first install, the
# keeper restarted on an upgrade.
set -e
if [ "$1" = configure ]; then
	if ! getent passwd soulstack >/dev/null; then
		adduser --system --group --home /var/lib/soulstack-keeper --no-create-home --quiet soulstack
	fi
	# keeper.yml may hold a database password: root:soulstack 0640 (an
	# admin's own mode is kept, never widened).
	if [ -f /etc/soulstack/keeper.yml ] && ! dpkg-statoverride --list /etc/soulstack/keeper.yml >/dev/null; then
		chgrp soulstack /etc/soulstack/keeper.yml
		chmod g+r,o-rwx /etc/soulstack/keeper.yml
	fi
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload
		if [ -z "$2" ]; then
			systemctl enable --now soulstack-keeper.service soulstack-keeper-backup.timer
		elif systemctl is-active --quiet soulstack-keeper.service; then
			systemctl restart soulstack-keeper.service
		fi
	fi
fi
