from sgeval_serve.cli import main

main()
