package version

// Release is the version packages are built as (scripts/package sets
// Version to it); a build from a checkout reports its VCS revision.
const Release = "0.24.0"
