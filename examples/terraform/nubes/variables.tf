variable "keeper_endpoint" {
  description = "The keeper's URL."
  type        = string
  default     = "http://127.0.0.1:8420"
}

variable "keeper_token" {
  description = "An API token with provider.create and profile.create (TF_VAR_keeper_token)."
  type        = string
  sensitive   = true
}

variable "name" {
  description = "The provider's name; the profile is <name>-small."
  type        = string
  default     = "nubes"
}

variable "fqdn_suffix" {
  description = "DNS suffix of the VMs' names: a VM is <name>-<i>.<fqdn_suffix>."
  type        = string
  default     = "nubes.example.com"
}

variable "credentials_ref" {
  description = "Where the keeper reads the deck-api token: credential:NAME (a project credential), env:NAME or file:/abs/path."
  type        = string
  default     = "credential:nubes"
}

variable "vapp_uid" {
  description = "The vApp (deck-api service 26) the VMs go into."
  type        = string
}

variable "deck_api_endpoint" {
  description = "The deck-api's base URL; null: the driver's default (Nubes' public deck-api). keeper.yml must allow it (drivers.nubes.endpoints)."
  type        = string
  default     = null
}

variable "address_key" {
  description = "Which key of a running instance's state.params holds its address (not public: see docs/drivers/nubes.md); null: the driver's default."
  type        = string
  default     = null
}

variable "extra_config" {
  description = "Other provider config keys: destroy (delete or suspend), poll_interval, retry_base."
  type        = map(string)
  default     = {}
}

variable "cpus" {
  type    = number
  default = 2
}

variable "memory_gb" {
  type    = number
  default = 4
}

variable "image" {
  type    = string
  default = "Debian_13-20G"
}

variable "user" {
  description = "The login the keeper's key is given to and the keeper logs in as."
  type        = string
  default     = "root"
}
