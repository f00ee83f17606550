// Package conf reads a program's configuration the way kvrouter's commands
// do: a YAML file decoded strictly into the configuration's structs (their
// yaml tags are the schema), flags bound to fields by their yaml paths from
// one table, and every problem reported at once, each located at the file's
// line and column or at the flag given on the command line.
//
// The packages that own a section validate it (their Config's Validate or
// Resolve); conf only carries the problems to the user.
package conf
