variable "keeper_endpoint" {
  description = "The keeper's URL; null uses SOULSTACK_KEEPER (or http://127.0.0.1:8420)."
  type        = string
  default     = null
}

variable "keeper_token" {
  description = "A keeper API token; null uses SOULSTACK_TOKEN."
  type        = string
  default     = null
  sensitive   = true
}

variable "cloud_provider" {
  description = "A registered provider (soulstack_provider, or soulctl provider create) to make the VMs with."
  type        = string
  default     = "local"
}

variable "cloud_profile" {
  description = "A registered profile of that provider."
  type        = string
  default     = "small"
}

variable "vm_count" {
  description = "How many local VMs to create when no existing host is given."
  type        = number
  default     = 1
}

variable "existing_host" {
  description = "An existing VM to install on instead of creating local VMs (e.g. one a cloud's own provider made)."
  type = object({
    sid     = string
    address = string
    user    = optional(string, "root")
    port    = optional(number, 22)
    key_ref = string
  })
  default = null
}

variable "install_packages" {
  description = "Install base_packages with apt."
  type        = bool
  default     = true
}

variable "install_docker" {
  description = "Install Docker Engine (and Compose)."
  type        = bool
  default     = false
}

variable "install_postgres" {
  description = "Install PostgreSQL with a database and a user."
  type        = bool
  default     = false
}

variable "base_packages" {
  description = "Packages to install when install_packages is set."
  type        = list(string)
  default     = ["git", "curl", "htop", "jq", "unzip"]
}

variable "pg_version" {
  description = "PostgreSQL major version, such as \"15\"; null installs the distribution's (15 on Debian 12). The seed's \"14\" is not in Debian 12's archive and comes from apt.postgresql.org, which needs internet: see README."
  type        = string
  default     = null
}

variable "pg_listen_addresses" {
  description = "The server's listen_addresses, such as \"*\"; null means localhost, or * when pg_allow_remote is set."
  type        = string
  default     = null
}

variable "pg_allow_remote" {
  description = "Add pg_hba.conf entries that let pg_db_user reach pg_db_name from other hosts with its password."
  type        = bool
  default     = false
}

variable "pg_db_name" {
  type    = string
  default = "myapp"
}

variable "pg_db_user" {
  type    = string
  default = "app_user"
}

variable "pg_db_password" {
  description = "Password of the PostgreSQL user; passed as sensitive_input."
  type        = string
  default     = ""
  sensitive   = true
}

variable "install_run_id" {
  description = "Bump to run the installs again."
  type        = number
  default     = 1
}
