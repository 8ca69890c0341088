package main

import (
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// usageText is the help of c: DESCRIPTION, USAGE, the long help,
// SUBCOMMANDS and FLAGS. Flags are written as they are typed: --name for a
// long name, -X for a one-letter one, followed by the kind of value they
// take (none for a switch) and, in the description, their default.
func usageText(c *ffcli.Command) string {
	var b strings.Builder
	if c.ShortHelp != "" {
		fmt.Fprintf(&b, "DESCRIPTION\n  %s\n\n", c.ShortHelp)
	}
	usage := c.ShortUsage
	if usage == "" {
		usage = c.Name
	}
	fmt.Fprintf(&b, "USAGE\n  %s\n\n", usage)
	if c.LongHelp != "" {
		fmt.Fprintf(&b, "%s\n\n", c.LongHelp)
	}
	if len(c.Subcommands) > 0 {
		b.WriteString("SUBCOMMANDS\n")
		tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
		for _, sub := range c.Subcommands {
			fmt.Fprintf(tw, "  %s\t%s\n", sub.Name, sub.ShortHelp)
		}
		tw.Flush()
		b.WriteString("\n")
	}
	var flags []*flag.Flag
	if c.FlagSet != nil {
		c.FlagSet.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	}
	if len(flags) > 0 {
		b.WriteString("FLAGS\n")
		tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
		for _, f := range flags {
			name, help := flag.UnquoteUsage(f)
			spelled := flagSpelling(f.Name)
			switch {
			case isBoolFlag(f) && f.DefValue == "true":
				spelled += "=true|false"
			case isBoolFlag(f):
			case name != "":
				spelled += " " + name
			default:
				spelled += " value"
			}
			if !isBoolFlag(f) && f.DefValue != "" && f.DefValue != "0" && f.DefValue != "[]" {
				help += " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\n", spelled, help)
		}
		tw.Flush()
		b.WriteString("\n")
	}
	return strings.TrimSpace(b.String()) + "\n"
}

// setUsage gives c and every command below it usageText.
func setUsage(c *ffcli.Command) {
	c.UsageFunc = usageText
	for _, sub := range c.Subcommands {
		setUsage(sub)
	}
}
