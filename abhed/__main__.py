from abhed.cli import main

main()
