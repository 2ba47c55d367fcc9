"""Everything that talks to the network: HTTP, robots.txt, politeness, URL rules."""
