from hf_train_mcp.cli import main

main()
