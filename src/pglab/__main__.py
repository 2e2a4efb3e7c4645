from pglab.cli import main

main()
