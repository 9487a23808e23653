fn main() -> std::process::ExitCode {
    nsys_perfetto::cli::main()
}
