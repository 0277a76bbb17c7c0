from hf_train_mcp.shell.cli import main

main()
