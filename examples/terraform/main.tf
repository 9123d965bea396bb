terraform {
  required_providers {
    soulstack = {
      source = "soulstack/soulstack"
    }
  }
}

provider "soulstack" {
  endpoint = var.keeper_endpoint
  token    = var.keeper_token
}

locals {
  create_vms = var.existing_host == null
}

# Local VMs: a run of spawn-vms.yaml on a registered provider and profile,
# undone on destroy by destroy-vms.yaml.
resource "soulstack_run" "vms" {
  count               = local.create_vms ? 1 : 0
  scenario            = "${path.module}/scenarios/spawn-vms.yaml"
  input               = jsonencode({ provider = var.cloud_provider, profile = var.cloud_profile, count = var.vm_count })
  on_destroy_scenario = replace(file("${path.module}/scenarios/destroy-vms.yaml"), "provider: local", "provider: ${var.cloud_provider}")
  wait_timeout_sec    = 300
}

# Or an existing VM, registered as a soul.
resource "soulstack_soul" "existing" {
  count   = local.create_vms ? 0 : 1
  sid     = var.existing_host.sid
  address = var.existing_host.address
  user    = var.existing_host.user
  port    = var.existing_host.port
  key_ref = var.existing_host.key_ref
}

locals {
  hosts = local.create_vms ? [for h in jsondecode(soulstack_run.vms[0].outputs).provision.hosts : h.sid] : [soulstack_soul.existing[0].sid]
}

# One run per install, each after the VM (the seed's depends_on on the VM;
# local.hosts already refers to it), packages first.
resource "soulstack_run" "packages" {
  count            = var.install_packages ? 1 : 0
  scenario         = "${path.module}/scenarios/install-packages.yaml"
  input            = jsonencode({ hosts = local.hosts, packages = var.base_packages })
  run_id           = var.install_run_id
  wait_timeout_sec = 600
  depends_on       = [soulstack_run.vms, soulstack_soul.existing]
}

resource "soulstack_run" "docker" {
  count            = var.install_docker ? 1 : 0
  scenario         = "${path.module}/scenarios/install-docker.yaml"
  input            = jsonencode({ hosts = local.hosts })
  run_id           = var.install_run_id
  wait_timeout_sec = 900
  depends_on       = [soulstack_run.vms, soulstack_soul.existing, soulstack_run.packages]
}

# PostgreSQL waits for the VM and the packages, not for Docker (as in the
# seed): with both flags on, the Docker and PostgreSQL runs go side by side.
resource "soulstack_run" "postgres" {
  count    = var.install_postgres ? 1 : 0
  scenario = "${path.module}/scenarios/install-postgres.yaml"
  input = jsonencode({
    hosts            = local.hosts
    pg_version       = var.pg_version
    db_name          = var.pg_db_name
    db_user          = var.pg_db_user
    listen_addresses = var.pg_listen_addresses
    allow_remote     = var.pg_allow_remote
  })
  sensitive_input  = jsonencode({ db_password = var.pg_db_password })
  run_id           = var.install_run_id
  wait_timeout_sec = 900
  depends_on       = [soulstack_run.vms, soulstack_soul.existing, soulstack_run.packages]
}
