output "hosts" {
  description = "The SIDs the installs ran on."
  value       = local.hosts
}

# Each install's status on every host ("ok", "partial", "already_installed"…),
# or "skipped" when its flag is off.
output "packages_status" {
  value = var.install_packages ? join(",", distinct([for sid, o in jsondecode(soulstack_run.packages[0].outputs).packages : o.status])) : "skipped"
}

output "docker_status" {
  value = var.install_docker ? join(",", distinct([for sid, o in jsondecode(soulstack_run.docker[0].outputs).docker : o.status])) : "skipped"
}

output "postgres_status" {
  value = var.install_postgres ? join(",", distinct([for sid, o in jsondecode(soulstack_run.postgres[0].outputs).postgres : o.status])) : "skipped"
}

# Each install run's message, as the seed's outputs show it: the JSON of the
# run's outputs (by step, then by host: status, installed, pg_version…), or
# "skipped". A run that fails fails the apply; its message, the error
# ("<step> on <sid>: <code>: <message>"), stays in the state
# (terraform state show 'soulstack_run.postgres[0]').
output "install_packages_result" {
  value = var.install_packages ? soulstack_run.packages[0].message : "skipped"
}

output "install_docker_result" {
  value = var.install_docker ? soulstack_run.docker[0].message : "skipped"
}

output "install_postgres_result" {
  value = var.install_postgres ? soulstack_run.postgres[0].message : "skipped"
}

output "steps" {
  description = "Each install run's step statuses."
  value = {
    packages = var.install_packages ? soulstack_run.packages[0].steps : null
    docker   = var.install_docker ? soulstack_run.docker[0].steps : null
    postgres = var.install_postgres ? soulstack_run.postgres[0].steps : null
  }
}
