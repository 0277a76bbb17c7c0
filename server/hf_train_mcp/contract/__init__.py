"""The tool contract: what each tool takes (requests) and answers (results), in words an agent can act on."""
