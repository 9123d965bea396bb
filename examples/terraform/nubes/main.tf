# The Nubes provider and profile in the keeper's registry: a configuration
# of their own, applied once, that outlives the VMs (souls a provider made
# keep it in use). The seed's layout one directory up then makes the VMs on
# it: terraform apply -var cloud_provider=nubes -var cloud_profile=nubes-small
# (see ../README.md, "On Nubes").
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

resource "soulstack_provider" "nubes" {
  name        = var.name
  driver      = "nubes"
  fqdn_suffix = var.fqdn_suffix
  # The deck-api token, as the keeper resolves it (credential:NAME is a
  # project credential: soulctl credential put nubes --from-file nubes.token).
  credentials_ref = var.credentials_ref
  config = jsonencode(merge(
    { vapp_uid = var.vapp_uid },
    var.deck_api_endpoint == null ? {} : { endpoint = var.deck_api_endpoint },
    var.address_key == null ? {} : { address_key = var.address_key },
    var.extra_config,
  ))
}

resource "soulstack_profile" "small" {
  name          = "${var.name}-small"
  provider_name = soulstack_provider.nubes.name
  spec = jsonencode({
    cpus      = var.cpus
    memory_gb = var.memory_gb
    image     = var.image
    user      = var.user
  })
}

output "cloud_provider" {
  description = "The provider's name: the seed's layout's cloud_provider."
  value       = soulstack_provider.nubes.name
}

output "cloud_profile" {
  description = "The profile's name: the seed's layout's cloud_profile."
  value       = soulstack_profile.small.name
}
