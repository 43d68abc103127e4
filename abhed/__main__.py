from abhed.cli.commands import main

main()
